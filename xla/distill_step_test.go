package xla

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
)

// teacherTopKRow is row r of a TeacherDist of mode topk as credit's float64 TopK.
// Empty slots (id −1, union) are left out.
func teacherTopKRow(d TeacherDist, r int) credit.TopK {
	K := d.K
	tk := credit.TopK{Tail: float64(d.Tail[r])}
	for j := range K {
		if id := d.IDs[r*K+j]; id >= 0 {
			tk.IDs, tk.LogProbs = append(tk.IDs, int(id)), append(tk.LogProbs, float64(d.LogProbs[r*K+j]))
		}
	}
	return tk
}

// teacherRowAsTopK is row r of a TeacherDist of either mode as credit's TopK (mode
// full: every id, no tail).
func teacherRowAsTopK(d TeacherDist, r int) credit.TopK {
	if d.Mode == credit.DistillTopK {
		return teacherTopKRow(d, r)
	}
	row := make([]float64, d.K)
	for j := range row {
		row[j] = float64(d.LogProbs[r*d.K+j])
	}
	return credit.NewTopK(row, d.K)
}

// TestScoreHintedView: the teacher pass's kept rows are the teacher's distribution
// at each span position. In mode full each row is a normalised log-distribution whose
// entry at the span's token is the teacher log-prob ScoreHinted returns; in mode topk
// each row is credit.NewTopK of the full row (ids, log-probs and the tail's mass),
// also for k past the vocabulary and with several chunks per span, against the paged
// and the contiguous (BucketAttention) cache.
func TestScoreHintedView(t *testing.T) {
	for _, bucket := range []bool{false, true} {
		t.Run(fmt.Sprintf("bucket=%v", bucket), func(t *testing.T) { testScoreHintedView(t, bucket) })
	}
}

func testScoreHintedView(t *testing.T, bucket bool) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 31)
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 16, BucketAttention: bucket})
	require.NoError(t, err)
	V := m.Config.VocabSize
	tokens := testTokens(60, V, 32)
	segs := []credit.Hint{
		{InsertAt: 10, End: 45, Tokens: testTokens(7, V, 33)},
		{InsertAt: 30, End: 52}, // no hint: the plain student, y_{a−1} rerun
	}
	q, err := s.ScoreHinted(t.Context(), tokens, nil, segs)
	require.NoError(t, err)
	qf, full, err := s.ScoreHintedView(t.Context(), tokens, nil, segs, TeacherView{Mode: credit.DistillFull})
	require.NoError(t, err)
	for k, sg := range segs {
		require.Equal(t, q[k], qf[k], "segment %d: the log-probs do not depend on the view", k)
		require.Equal(t, sg.End-sg.InsertAt, full[k].Rows())
		for r := range full[k].Rows() {
			row := f64s(full[k].LogProbs[r*V : (r+1)*V])
			var mass float64
			for _, x := range row {
				mass += math.Exp(x)
			}
			require.InDelta(t, 1, mass, 1e-5, "segment %d row %d", k, r)
			require.InDelta(t, float64(q[k][r]), row[tokens[sg.InsertAt+r]], 1e-5, "segment %d row %d", k, r)
		}
	}
	for _, K := range []int{1, 8, V + 3} {
		_, top, err := s.ScoreHintedView(t.Context(), tokens, nil, segs, TeacherView{Mode: credit.DistillTopK, K: K})
		require.NoError(t, err)
		for k := range segs {
			require.Equal(t, min(K, V), top[k].K)
			for r := range top[k].Rows() {
				want := credit.NewTopK(f64s(full[k].LogProbs[r*V:(r+1)*V]), K)
				got := teacherTopKRow(top[k], r)
				require.Equal(t, want.IDs, got.IDs, "k=%d segment %d row %d", K, k, r)
				for j := range want.IDs {
					require.InDelta(t, want.LogProbs[j], got.LogProbs[j], 1e-5)
				}
				if math.IsInf(want.Tail, -1) {
					require.True(t, math.IsInf(got.Tail, -1))
				} else {
					require.InDelta(t, want.Tail, got.Tail, 1e-4, "k=%d segment %d row %d tail", K, k, r)
				}
			}
		}
	}
	// topk_ids student and union: the student's own top k (its plain re-pass over each
	// segment), the teacher gathered at them, are credit.SelectTopK of the student's
	// and the teacher's full rows.
	plain := []credit.Hint{{InsertAt: 10, End: 45}, {InsertAt: 30, End: 52}}
	_, sfull, err := s.ScoreHintedView(t.Context(), tokens, nil, plain, TeacherView{Mode: credit.DistillFull})
	require.NoError(t, err)
	for _, ids := range []credit.TopKIDs{credit.IDsStudent, credit.IDsUnion} {
		for _, K := range []int{1, 8} {
			view := TeacherView{Mode: credit.DistillTopK, K: K, IDs: ids}
			own, err := s.StudentTopK(t.Context(), tokens, nil, segs, view, 1)
			require.NoError(t, err)
			qa, top, err := s.ScoreHintedAt(t.Context(), tokens, nil, segs, view, own, 1)
			require.NoError(t, err)
			for k := range segs {
				require.Equal(t, q[k], qa[k], "segment %d: the log-probs do not depend on the view", k)
				require.Equal(t, view.width(V), top[k].K)
				for r := range top[k].Rows() {
					want := credit.SelectTopK(ids, f64s(sfull[k].LogProbs[r*V:(r+1)*V]), f64s(full[k].LogProbs[r*V:(r+1)*V]), K)
					got := teacherTopKRow(top[k], r)
					require.Equal(t, want.IDs, got.IDs, "%s k=%d segment %d row %d", ids, K, k, r)
					for j := range want.IDs {
						require.InDelta(t, want.LogProbs[j], got.LogProbs[j], 1e-5)
					}
					require.InDelta(t, want.Tail, got.Tail, 1e-4, "%s k=%d segment %d row %d tail", ids, K, k, r)
				}
			}
		}
	}
	_, _, err = s.ScoreHintedAt(t.Context(), tokens, nil, segs, TeacherView{Mode: credit.DistillTopK, K: 4, IDs: credit.IDsStudent}, nil, 1)
	require.ErrorContains(t, err, "student rows")
}

// TestScoreTemperature: scoring at a sampling temperature T is the float64
// reference's tempered policy. The student's log-probs (ScoreAt), the teacher's
// (ScoreHintedAt) and the teacher's kept full rows at T equal
// credit.LogSoftmax(credit.Tempered(row, T)) of the same rows at temperature 1
// (log-softmax is shift-invariant, so the temperature-1 log-distribution stands
// for the logits), and T = 1 is Score bit for bit.
func TestScoreTemperature(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 31)
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	V := m.Config.VocabSize
	tokens := testTokens(60, V, 34)
	plain, c0, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	c0.Close()
	plain1, c1, err := s.ScoreAt(t.Context(), tokens, 1)
	require.NoError(t, err)
	c1.Close()
	require.Equal(t, plain[1:], plain1[1:], "temperature 1 leaves the log-probs bit for bit")
	segs := []credit.Hint{
		{InsertAt: 1, End: 60},                                // the student itself, every position
		{InsertAt: 10, End: 45, Tokens: testTokens(7, V, 35)}, // a hinted teacher
	}
	full := TeacherView{Mode: credit.DistillFull}
	_, rows1, err := s.ScoreHintedView(t.Context(), tokens, nil, segs, full)
	require.NoError(t, err)
	for _, temp := range []float64{0.7, 1.5} {
		st, cache, err := s.ScoreAt(t.Context(), tokens, temp)
		require.NoError(t, err)
		cache.Close()
		q, rows, err := s.ScoreHintedAt(t.Context(), tokens, nil, segs, full, nil, temp)
		require.NoError(t, err)
		for k, sg := range segs {
			for r := range sg.End - sg.InsertAt {
				want := credit.LogSoftmax(credit.Tempered(f64s(rows1[k].LogProbs[r*V:(r+1)*V]), temp))
				y := tokens[sg.InsertAt+r]
				require.InDelta(t, want[y], float64(q[k][r]), 2e-5, "T=%g segment %d row %d", temp, k, r)
				for j := range V {
					require.InDelta(t, want[j], float64(rows[k].LogProbs[r*V+j]), 2e-5, "T=%g segment %d row %d id %d", temp, k, r, j)
				}
				if k == 0 {
					require.InDelta(t, want[y], float64(st[sg.InsertAt+r]), 2e-5, "T=%g: ScoreAt at %d", temp, sg.InsertAt+r)
				}
			}
		}
	}
	_, _, err = s.ScoreAt(t.Context(), tokens, 0)
	require.ErrorContains(t, err, "temperature 0")
}

// distillStepCase is one rollout with a hinted span, its credit and its teacher rows.
type distillStepCase struct {
	cfg    credit.Config
	tokens []int32
	rs     []credit.Sequence
	res    []credit.Result
	dists  []TeacherDist
	budget int
	temp   float64 // the rollout's sampling temperature
}

// newDistillStepCase scores a rollout (student and, through the hint, teacher with
// view), and computes its credit under cfg with a reward, so both the outcome and
// the distillation term are in the loss. Every pass runs at the rollout's sampling
// temperature temp.
func newDistillStepCase(t *testing.T, s *Scorer, cfg credit.Config, seed uint64, temp float64) distillStepCase {
	t.Helper()
	V := s.model.Config.VocabSize
	T := 48
	c := distillStepCase{cfg: cfg, tokens: testTokens(T, V, seed), budget: T, temp: temp}
	student, cache, err := s.ScoreAt(t.Context(), c.tokens, temp)
	require.NoError(t, err)
	cache.Close()
	rng := rand.New(rand.NewPCG(seed, 9))
	r := credit.Sequence{ID: "r", TaskID: "t", Tokens: c.tokens, Student: f64s(student), Sampler: make([]float64, T),
		Trainable: make([]bool, T), Reward: 1, HasReward: true, Temperature: temp,
		Hints: []credit.Hint{{InsertAt: 14, End: 40, Tokens: testTokens(6, V, seed+1)}}}
	for i := 1; i < T; i++ {
		r.Trainable[i], r.Sampler[i] = true, math.Min(0, r.Student[i]+0.2*rng.NormFloat64())
	}
	view := viewOf(cfg.Distill)
	var own []TeacherDist
	if view.takesIDs() {
		own, err = s.StudentTopK(t.Context(), c.tokens, nil, r.Hints, view, temp)
		require.NoError(t, err)
	}
	q, dists, err := s.ScoreHintedAt(t.Context(), c.tokens, nil, r.Hints, view, own, temp)
	require.NoError(t, err)
	r.Hints[0].Teacher = f64s(q[0])
	c.rs, c.dists = []credit.Sequence{r}, dists
	b := credit.NewBaselines()
	b.Global, b.Seen = 0.25, true // a lone rollout's advantage: 1 − 0.25
	c.res, _, err = credit.Step(cfg, c.rs, b, c.budget)
	require.NoError(t, err)
	return c
}

// terms are the case's device loss inputs.
func (c distillStepCase) terms(t *testing.T, V int) chunkTerms {
	ct := chunkTerms{Weight: make([]float32, len(c.tokens)), Temp: c.temp}
	for i, w := range c.res[0].Weight {
		ct.Weight[i] = float32(w)
	}
	d, err := newDistillTerms(viewOf(c.cfg.Distill), V, c.res[0].DistillWeight, c.rs[0].Hints, c.dists)
	require.NoError(t, err)
	ct.Distill = d
	return ct
}

// refLoss is the case's loss at the model's current weights, computed apart from the
// training graph: the student's log-probs and full log-distributions from scoring
// passes, each position's divergence by credit.DistillPosition (float64) against the
// teacher rows kept at the start, and credit.LossTerms with the credit held fixed.
// It returns the outcome term and the distillation term.
func (c distillStepCase) refLoss(t *testing.T, s *Scorer) (out, distill float64) {
	t.Helper()
	T := len(c.tokens)
	lp, cache, err := s.ScoreAt(t.Context(), c.tokens, c.temp)
	require.NoError(t, err)
	cache.Close()
	_, rows, err := s.ScoreHintedAt(t.Context(), c.tokens, nil, []credit.Hint{{InsertAt: 1, End: T}}, TeacherView{Mode: credit.DistillFull}, nil, c.temp)
	require.NoError(t, err)
	V := rows[0].K
	h := c.rs[0].Hints[0]
	div := make([]float64, T)
	for i := h.InsertAt; i < h.End; i++ {
		if c.res[0].DistillWeight[i] == 0 {
			continue
		}
		z := f64s(rows[0].LogProbs[(i-1)*V : i*V])
		div[i], _ = credit.DistillPosition(c.cfg.Distill, z, teacherRowAsTopK(c.dists[0], i-h.InsertAt))
	}
	tm := credit.LossTerms(c.cfg, c.rs, c.res, [][]float64{f64s(lp)}, [][]float64{div}, c.budget)
	return tm.Out + tm.KL, tm.Distill
}

// TestDistillStepGradient checks the training pass's gradient of the combined loss
// (outcome policy-gradient term + Σ DistillWeight·D) against central finite
// differences of refLoss, a loss computed without the training graph, along random
// directions in every weight, for modes topk and full and three divergences, at
// temperature 1 and at a rollout's sampling temperature (0.7, 1.5: every pass
// divides the logits by it), through one causal pass and through the chunked exact
// pass. The tolerance is a tenth of the
// distillation term's own directional derivative, so a training pass that drops the
// term or flips its sign fails.
func TestDistillStepGradient(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, smallFields(), 41)
	V := m.Config.VocabSize
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	for ci, tc := range []struct {
		dc   credit.DistillConfig
		temp float64
	}{
		{credit.DistillConfig{Mode: credit.DistillTopK, TopK: 8, Divergence: credit.DivReverseKL, TopKIDs: credit.IDsTeacher, Tail: credit.TailExact}, 1},
		{credit.DistillConfig{Mode: credit.DistillTopK, TopK: 8, Divergence: credit.DivJSD, JSDAlpha: 0.5, TopKIDs: credit.IDsTeacher}, 1},
		{credit.DistillConfig{Mode: credit.DistillTopK, TopK: 8, Divergence: credit.DivReverseKL, TopKIDs: credit.IDsStudent, ISCap: 2}, 1},
		{credit.DistillConfig{Mode: credit.DistillTopK, TopK: 4, Divergence: credit.DivForwardKL, TopKIDs: credit.IDsUnion}, 1},
		{credit.DistillConfig{Mode: credit.DistillFull, TopK: 1, Divergence: credit.DivForwardKL}, 1},
		{credit.DistillConfig{Mode: credit.DistillTopK, TopK: 8, Divergence: credit.DivReverseKL, TopKIDs: credit.IDsStudent, ISCap: 2}, 0.7},
		{credit.DistillConfig{Mode: credit.DistillFull, TopK: 1, Divergence: credit.DivJSD, JSDAlpha: 0.5}, 1.5},
	} {
		if testing.Short() && tc.temp == 1.5 {
			continue // CI's XLA CPU pass (-short): one temperature case is enough there
		}
		dc := tc.dc
		cfg := credit.DefaultConfig()
		cfg.Normalize, cfg.LambdaDistill = credit.NormalizeSeparate, 1
		dc.JSDAlpha, dc.ClipScope = max(dc.JSDAlpha, 0.5), credit.ClipEntry
		cfg.Distill = dc
		p, err := newGradPass(backend, m)
		require.NoError(t, err)
		require.NoError(t, p.withDistill(dc))
		c := newDistillStepCase(t, s, cfg, uint64(50+ci), tc.temp)
		for _, mode := range []Backprop{BackpropFull, BackpropExact} {
			name := fmt.Sprintf("%s %s %s T=%g %s", dc.Mode, dc.TopKIDs, dc.Divergence, tc.temp, mode)
			acc := p.zeroGrads()
			_, cache, err := s.Score(t.Context(), c.tokens)
			require.NoError(t, err)
			_, err = p.accumulate(t.Context(), mode, s, c.tokens, cache, c.terms(t, V), 16, 0, acc)
			cache.Close()
			require.NoError(t, err)
			grads := make([][]float32, len(acc))
			for i, a := range acc {
				grads[i] = tensors.MustCopyFlatData[float32](a)
				a.FinalizeAll()
			}
			rng := rand.New(rand.NewPCG(uint64(ci), 1))
			for dir := range 2 {
				v := make([][]float32, len(p.params))
				var analytic float64
				for i := range v {
					v[i] = make([]float32, len(grads[i]))
					for j := range v[i] {
						v[i][j] = float32(rng.NormFloat64())
						analytic += float64(v[i][j]) * float64(grads[i][j])
					}
				}
				const h = 3e-4
				shift(t, p, v, h)
				o1, d1 := c.refLoss(t, s)
				shift(t, p, v, -2*h)
				o0, d0 := c.refLoss(t, s)
				shift(t, p, v, h) // back to θ
				fdOut, fdDistill := (o1-o0)/(2*h), (d1-d0)/(2*h)
				t.Logf("%s dir %d: analytic %.6g, finite differences %.6g (outcome %.6g, distillation %.6g)",
					name, dir, analytic, fdOut+fdDistill, fdOut, fdDistill)
				require.Greater(t, math.Abs(fdDistill), 1e-3*math.Abs(fdOut), "%s: the distillation term must move the loss", name)
				require.InDelta(t, fdOut+fdDistill, analytic, 0.1*math.Abs(fdDistill), "%s dir %d", name, dir)
			}
		}
	}
}

// shift adds h·v to the model's trained weights (p's, in order); scorers read the
// variables at each run.
func shift(t *testing.T, p *gradPass, v [][]float32, h float64) {
	t.Helper()
	for i, vr := range p.params {
		x := tensors.MustCopyFlatData[float32](vr.MustValue())
		for j := range x {
			x[j] += float32(h) * v[i][j]
		}
		require.NoError(t, vr.SetValue(tensors.FromFlatDataAndDimensions(x, vr.Shape().Dimensions...)))
	}
}

// TestTrainerDistillStep runs Trainer.Step with modes topk and full: the step's
// statistics carry both loss terms (their sum is the step's loss) and, with
// TermGradNorms, each term's gradient norm, which bound the step's gradient norm by
// the triangle inequality; and splitting the pass in two leaves the update as it was
// (the same weights after the step as a trainer without the split).
func TestTrainerDistillStep(t *testing.T) {
	if testing.Short() {
		// Whole steps in two modes, each twice (with and without term gradient norms):
		// ~2 min on XLA CPU. The default run (go test ./...) has it; TestDistillStepGradient
		// checks the term's gradient in -short runs too.
		t.Skip("whole distillation steps: not in -short")
	}
	backend := newTestBackend(t)
	for _, dc := range []credit.DistillConfig{
		{Mode: credit.DistillTopK, TopK: 8, Divergence: credit.DivJSD, JSDAlpha: 0.5, ClipScope: credit.ClipEntry},
		{Mode: credit.DistillFull, TopK: 1, Divergence: credit.DivReverseKL, JSDAlpha: 0.5, ClipScope: credit.ClipEntry},
	} {
		cfg := credit.DefaultConfig()
		cfg.Normalize, cfg.LambdaDistill, cfg.Distill = credit.NormalizeSeparate, 1, dc
		var weights [2][][]float32
		var mets [2]Metrics
		for i, split := range []bool{false, true} {
			m := testModel(t, smallFields(), 61)
			tr, err := NewTrainer(backend, m, TrainerOptions{Chunk: 16, Scorer: ScorerOptions{Chunk: 16}, Credit: cfg, TermGradNorms: split})
			require.NoError(t, err)
			V, T := m.Config.VocabSize, 64
			r := credit.Sequence{ID: "r", TaskID: "t", Tokens: testTokens(T, V, 62), Sampler: make([]float64, T),
				Trainable: make([]bool, T), Reward: 1, HasReward: true,
				Hints: []credit.Hint{{InsertAt: 20, End: 50, Tokens: testTokens(5, V, 63)}}}
			for j := range T {
				r.Trainable[j], r.Sampler[j] = j > 0, -5
			}
			tr.Baselines().Global, tr.Baselines().Seen = 0.5, true
			mets[i], err = tr.Step(t.Context(), []credit.Sequence{r})
			require.NoError(t, err)
			weights[i] = weightsOf(m)
		}
		met := mets[1]
		t.Logf("%s: loss %.5g = outcome %.5g + distill %.5g; grad norm %.4g, outcome %.4g, distill %.4g",
			dc.Mode, met.Loss, met.Terms.Out, met.Terms.Distill, met.GradNorm, met.OutGradNorm, met.DistillGradNorm)
		require.True(t, met.Updated)
		require.Greater(t, met.Terms.Distill, 0.0, "a divergence without clip is positive")
		require.NotZero(t, met.Terms.Out)
		require.InDelta(t, met.Loss, met.Terms.Total(), 1e-4)
		require.InDelta(t, mets[0].Loss, mets[0].Terms.Total(), 1e-4)
		require.InDelta(t, mets[0].Terms.Distill, met.Terms.Distill, 1e-6)
		require.True(t, math.IsNaN(mets[0].OutGradNorm) && math.IsNaN(mets[0].DistillGradNorm), "no split: no term norms")
		require.Greater(t, met.OutGradNorm, 0.0)
		require.Greater(t, met.DistillGradNorm, 0.0)
		require.LessOrEqual(t, met.GradNorm, (met.OutGradNorm+met.DistillGradNorm)*(1+1e-5))
		require.GreaterOrEqual(t, met.GradNorm, math.Abs(met.OutGradNorm-met.DistillGradNorm)*(1-1e-5))
		require.InDelta(t, mets[0].GradNorm, met.GradNorm, 1e-4*met.GradNorm)
		for p := range weights[0] {
			for j := range weights[0][p] {
				require.InDelta(t, weights[0][p][j], weights[1][p][j], 1e-5, "parameter %d element %d", p, j)
			}
		}
	}
}
