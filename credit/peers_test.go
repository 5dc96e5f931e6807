package credit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit/credittest"
)

// peerConfig is the DistillConfig that is the peers' convention for c: the student's
// ids, the clamped tail, the importance weight capped at is_clip.
func peerConfig(c credittest.PeerCase) DistillConfig {
	cfg := DefaultDistillConfig()
	cfg.Mode, cfg.TopK, cfg.TopKIDs, cfg.Tail = DistillMode(c.Mode), max(c.K, 1), IDsStudent, TailClamped
	switch c.Alpha {
	case 0:
		cfg.Divergence = DivForwardKL
	case 1:
		cfg.Divergence = DivReverseKL
	default:
		cfg.Divergence, cfg.JSDAlpha = DivJSD, c.Alpha
	}
	cfg.ISCap = 0
	if c.ISClip != nil {
		cfg.ISCap = *c.ISClip
	}
	return cfg
}

// TestPeerGoldens holds the float64 reference to TRL's SDPO loss functions and the
// SDPO authors' compute_self_distillation_loss, run on the same logits
// (testdata/distill/peers.json, from scripts/distill_goldens.py), for modes topk
// (the student's ids, the clamped tail), full and sampled_token, every divergence,
// several vocabularies, a confident teacher, masks and unequal lengths, the
// importance weight and the sampling temperature. The mapping where hindsight's
// convention differs by design:
//
//   - the authors' token mean is credit's normalize: separate with λ_distill 1:
//     Σ_t DistillWeight_t·D_t from credit.Step, DistillWeight = IS_t/N_distill;
//   - TRL's per-sequence token mean then mean over sequences weighs token t of
//     sequence b by 1/(B·n_b) instead of 1/N;
//   - sampled_token: the peers' per-token loss is the surrogate sg(l − a)·l, whose
//     gradient is credit.SampledTokenPosition's without the gate (the Δ clip at
//     credit.clip is hindsight's); its value is (l − a)·l, not the estimate l − a;
//   - the temperature divides both sides' logits before the divergence (Tempered,
//     as the device's scoring and training steps do), and the importance weight is
//     taken at the scaled student's log-prob.
func TestPeerGoldens(t *testing.T) {
	for _, c := range credittest.PeerCases(t) {
		cfg := peerConfig(c)
		B, T := len(c.Mask), len(c.Mask[0])
		// Hindsight's credit for the batch: one rollout per sequence, the masked
		// positions trainable and inside one teacher span.
		ccfg := DefaultConfig()
		ccfg.Normalize, ccfg.LambdaDistill, ccfg.LambdaOut = NormalizeSeparate, 1, 1
		ccfg.Distill = cfg
		if c.Mode == string(DistillSampledToken) {
			ccfg.Distill.Mode = DistillFull // the IS weight and DistillWeight; the value is mapped below
		}
		rs := make([]Sequence, B)
		D := make([][]float64, B)
		G := make([][][]float64, B)
		var authorsLoss, trlLoss float64
		for b := range B {
			n := 0
			rs[b] = Sequence{ID: c.Name, Student: make([]float64, T), Sampler: make([]float64, T), Trainable: make([]bool, T), Temperature: c.Temp}
			D[b], G[b] = make([]float64, T), make([][]float64, T)
			for t0 := range T {
				z := Tempered(c.Student[b][t0], c.Temp)
				a := LogSoftmax(Tempered(c.Teacher[b][t0], c.Temp))
				y := c.IDs[b][t0]
				rs[b].Student[t0] = LogSoftmax(z)[y]
				rs[b].Sampler[t0] = c.Old[b][t0]
				rs[b].Trainable[t0] = c.Mask[b][t0] == 1
				if c.Mask[b][t0] == 1 {
					n++
				}
				var d float64
				var g []float64
				switch DistillMode(c.Mode) {
				case DistillTopK:
					d, g = DistillPosition(cfg, z, SelectTopK(cfg.TopKIDs, z, a, c.K))
				case DistillFull:
					d, g = DistillPosition(cfg, z, NewTopK(a, c.Vocab))
				default:
					var est float64
					est, g = SampledTokenPosition(nil, z, y, a[y])
					d = est * rs[b].Student[t0] // the peers' surrogate value sg(l − a)·l
				}
				D[b][t0], G[b][t0] = d, Tempered(g, c.Temp) // ∂/∂logits = ∂/∂z / T
				require.InDelta(t, c.PerToken[b][t0], d, 1e-10*max(1, math.Abs(d)), "%s: per-token loss [%d, %d]", c.Name, b, t0)
			}
			rs[b].Hints = []Hint{{InsertAt: 0, End: n, Teacher: make([]float64, n)}}
			for t0 := range n {
				rs[b].Hints[0].Teacher[t0] = -1
			}
		}
		res, _, err := Step(ccfg, rs, NewBaselines(), 1)
		require.NoError(t, err, c.Name)
		gA := make([][][]float64, B)
		gT := make([][][]float64, B)
		for b := range B {
			n := 0.0
			for _, m := range c.Mask[b] {
				n += m
			}
			gA[b], gT[b] = make([][]float64, T), make([][]float64, T)
			for t0 := range T {
				gA[b][t0], gT[b][t0] = make([]float64, c.Vocab), make([]float64, c.Vocab)
				if c.Mask[b][t0] == 0 {
					continue
				}
				w := res[b].DistillWeight[t0]                 // the authors' token mean: IS/N
				wT := res[b].DistillIS[t0] / (float64(B) * n) // TRL: IS/(B·n_b)
				authorsLoss += w * D[b][t0]
				trlLoss += wT * D[b][t0]
				for j, x := range G[b][t0] {
					gA[b][t0][j], gT[b][t0][j] = w*x, wT*x
				}
			}
		}
		require.InDelta(t, c.Authors.Loss, authorsLoss, 1e-10*max(1, math.Abs(authorsLoss)), "%s: the authors' loss", c.Name)
		require.InDelta(t, c.TRL.Loss, trlLoss, 1e-10*max(1, math.Abs(trlLoss)), "%s: TRL's loss", c.Name)
		for b := range B {
			for t0 := range T {
				for j := range c.Vocab {
					require.InDelta(t, c.Authors.Grad[b][t0][j], gA[b][t0][j], 1e-10, "%s: the authors' gradient [%d, %d, %d]", c.Name, b, t0, j)
					require.InDelta(t, c.TRL.Grad[b][t0][j], gT[b][t0][j], 1e-10, "%s: TRL's gradient [%d, %d, %d]", c.Name, b, t0, j)
				}
			}
		}
	}
}
