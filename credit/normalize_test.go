package credit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// twoRollouts: r1 succeeded (reward 1, 3 trainable tokens, no hint), r2 failed (reward
// 0, 4 trainable tokens, a hint span over 2 of them). Sampler = student, so ρ = 1.
func twoRollouts() []Sequence {
	lp := []float64{-1, -1, -1, -1, -1}
	return []Sequence{
		{ID: "ok", TaskID: "t", Student: lp, Sampler: lp, Trainable: []bool{false, true, true, true, false},
			Reward: 1, HasReward: true},
		{ID: "bad", TaskID: "t", Student: lp, Sampler: lp, Trainable: []bool{false, true, true, true, true},
			Reward: 0, HasReward: true,
			Hints: []Hint{{InsertAt: 3, End: 5, Teacher: []float64{-0.5, -3}}}},
	}
}

func TestNormalizeSeparate(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Normalize, cfg.LambdaOut, cfg.LambdaDistill = NormalizeSeparate, 1, 0.5
	res, st, err := Step(cfg, twoRollouts(), NewBaselines(), 100)
	require.NoError(t, err)
	// A_out = ±1 (leave-one-out); N_out = 7 trainable tokens with a reward; N_distill = 2.
	require.Equal(t, 7, st.OutTokens)
	require.Equal(t, 2, st.DistillTokens)
	for t0 := 1; t0 <= 3; t0++ {
		require.InDelta(t, 1.0/7, res[0].Weight[t0], 1e-12)
	}
	// Δ = [−0.5+1, −3+1] = [0.5, −2] → clipped at 2: A_hint = [0.5, −2].
	require.InDelta(t, -1.0/7, res[1].Weight[1], 1e-12)
	require.InDelta(t, -1.0/7+0.5*0.5/2, res[1].Weight[3], 1e-12)
	require.InDelta(t, -1.0/7+0.5*-2/2, res[1].Weight[4], 1e-12)
	require.InDelta(t, -1.0/7, res[1].WeightOut[4], 1e-12)
	require.InDelta(t, -1+0.5*-2, res[1].Adv[4], 1e-12, "A_t = λ_out·A_out + λ_distill·A_hint")
	// Each term's coefficient mass is λ times its mean |ρ·A| whatever the other's count.
	require.InDelta(t, 1.0, st.OutWeightAbs, 1e-12)
	require.InDelta(t, 0.5*(0.5+2)/2, st.DistillWeightAbs, 1e-12)

	// Ten more successful rollouts without hints do not thin the distillation term.
	rs := twoRollouts()
	for range 10 {
		rs = append(rs, twoRollouts()[0])
	}
	_, st2, err := Step(cfg, rs, NewBaselines(), 100)
	require.NoError(t, err)
	require.InDelta(t, st.DistillWeightAbs, st2.DistillWeightAbs, 1e-12)

	// Under budget normalisation the same step divides everything by N = 100.
	cfg.Normalize = NormalizeBudget
	res, st, err = Step(cfg, twoRollouts(), NewBaselines(), 100)
	require.NoError(t, err)
	require.InDelta(t, (-1+cfg.LambdaHint*-2)/100, res[1].Weight[4], 1e-12)
	require.InDelta(t, 7.0/100, st.OutWeightAbs, 1e-12)
}

func TestNormalizeSeparateWithoutRewardOrHint(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Normalize = NormalizeSeparate
	rs := twoRollouts()
	for i := range rs {
		rs[i].HasReward = false
	}
	rs[1].Hints = nil
	res, st, err := Step(cfg, rs, NewBaselines(), 100)
	require.NoError(t, err)
	require.Zero(t, st.OutTokens)
	require.Zero(t, st.DistillTokens)
	for _, r := range res {
		for _, w := range r.Weight {
			require.Zero(t, w, "no term, no weight (no division by a zero count)")
			require.False(t, math.IsNaN(w))
		}
	}
}

func TestTopKModeKeepsTheHintOutOfTheAdvantage(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Normalize, cfg.LambdaDistill = NormalizeSeparate, 2
	cfg.Distill.Mode = DistillTopK
	res, st, err := Step(cfg, twoRollouts(), NewBaselines(), 100)
	require.NoError(t, err)
	r := res[1]
	require.InDelta(t, -1.0/7, r.Weight[4], 1e-12, "the policy-gradient weight is the outcome alone")
	require.InDelta(t, -1.0, r.Adv[4], 1e-12)
	require.Equal(t, []float64{0, 0, 0, 1, 1}, r.DistillWeight, "λ_distill/N_distill = 2/2 on the span")
	require.InDelta(t, 2.0, st.DistillWeightAbs, 1e-12)
	require.False(t, math.IsNaN(r.Delta[3]), "Δ is still reported")

	logp := [][]float64{{-1, -1, -1, -1, -1}, {-1, -1, -1, -1, -1}}
	div := [][]float64{make([]float64, 5), {0, 0, 0, 0.25, 0.5}}
	tm := LossTerms(cfg, twoRollouts(), res, logp, div, 100)
	require.InDelta(t, 0.75, tm.Distill, 1e-12)
	require.InDelta(t, Loss(cfg, twoRollouts(), res, logp, 100), tm.Out+tm.KL, 1e-12)
}

func TestLossTermsSumToLoss(t *testing.T) {
	for _, norm := range []Normalize{NormalizeBudget, NormalizeSeparate} {
		cfg := DefaultConfig()
		cfg.Normalize, cfg.KLBeta = norm, 0.1
		rs := twoRollouts()
		for i := range rs {
			rs[i].Ref = []float64{-1.5, -0.5, -2, -1, -1.2}
		}
		res, _, err := Step(cfg, rs, NewBaselines(), 100)
		require.NoError(t, err)
		logp := [][]float64{{-1, -0.8, -1.2, -0.4, -2}, {-1, -0.3, -1.1, -0.9, -1.6}}
		tm := LossTerms(cfg, rs, res, logp, nil, 100)
		require.InDelta(t, Loss(cfg, rs, res, logp, 100), tm.Total(), 1e-12, "%s", norm)
		require.NotZero(t, tm.Out)
		require.NotZero(t, tm.Distill)
		require.Positive(t, tm.KL)
	}
}

func TestConfigValidateNamesNewFields(t *testing.T) {
	for _, tt := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Normalize = "tokens" }, "normalize:"},
		{func(c *Config) { c.LambdaDistill = -1 }, "lambda_distill:"},
		{func(c *Config) { c.Distill.Mode = "logit" }, "distill.mode:"},
	} {
		c := DefaultConfig()
		tt.mod(&c)
		err := c.Validate()
		require.Error(t, err)
		require.Contains(t, err.Error(), tt.want)
	}
	c := DefaultConfig()
	c.Normalize, c.Distill = "", DistillConfig{}
	require.NoError(t, c.Validate(), "configs written before the fields")
	require.Equal(t, NormalizeBudget, c.Normalize)
	require.Equal(t, DistillSampledToken, c.Distill.Mode)
}

// TestBudgetWeightsBitForBit: under normalize budget the weights are exactly the
// formula docs/design.md gives, ρ·(λ_out·A_out + λ_hint·A_hint)/N, to the last bit, so runs
// before and after the split compare.
func TestBudgetWeightsBitForBit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LambdaOut, cfg.LambdaHint = 0.7, 0.3
	rs := twoRollouts()
	rs[1].Sampler = []float64{-1, -1.3, -0.9, -1.1, -1.7}
	res, _, err := Step(cfg, rs, NewBaselines(), 97)
	require.NoError(t, err)
	for i, r := range res {
		for tt, m := range rs[i].Trainable {
			if !m {
				continue
			}
			want := r.Rho[tt] * (cfg.LambdaOut*r.AOut + cfg.LambdaHint*r.AHint[tt]) / 97
			require.Equal(t, want, r.Weight[tt], "rollout %d token %d", i, tt)
		}
	}
}

// TestDistillImportanceWeight: the divergence term carries min(π/π_old, is_cap) per
// token, as the SDPO authors apply it; 1 without a sampler log-prob or with is_cap 0;
// the step's statistics report its mean and the share at the cap.
func TestDistillImportanceWeight(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Normalize, cfg.LambdaDistill = NormalizeSeparate, 1
	cfg.Distill.Mode = DistillFull
	rs := twoRollouts()
	// Span [3, 5): π/π_old = e^0.5 at 3 (under the cap 2), e^3 at 4 (capped).
	rs[1].Student = []float64{-1, -1, -1, -0.5, -1}
	rs[1].Sampler = []float64{-1, -1, -1, -1, -4}
	res, st, err := Step(cfg, rs, NewBaselines(), 100)
	require.NoError(t, err)
	r := res[1]
	require.InDelta(t, math.Exp(0.5), r.DistillIS[3], 1e-12)
	require.Equal(t, 2.0, r.DistillIS[4])
	require.InDelta(t, math.Exp(0.5)/2, r.DistillWeight[3], 1e-12, "λ_distill/N_distill · ρ")
	require.InDelta(t, 1.0, r.DistillWeight[4], 1e-12)
	require.InDelta(t, (math.Exp(0.5)+2)/2, st.DistillISMean, 1e-12)
	require.InDelta(t, 0.5, st.DistillISCapped, 1e-12)
	// A huge ratio is clamped in the log domain first: still the cap, never Inf.
	require.Equal(t, 2.0, distillIS(2, 0, -1e6))
	require.InDelta(t, math.Exp(-20), distillIS(2, -1e6, 0), 1e-20)

	cfg.Distill.ISCap = 0
	res, st, err = Step(cfg, rs, NewBaselines(), 100)
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0, 0, 0.5, 0.5}, res[1].DistillWeight, "is_cap 0: no weight")
	require.Equal(t, 1.0, st.DistillISMean)

	cfg.Distill.ISCap = 2
	rs[1].Sampler = []float64{math.NaN(), math.NaN(), math.NaN(), math.NaN(), -1}
	res, _, err = Step(cfg, rs, NewBaselines(), 100)
	require.NoError(t, err)
	require.Equal(t, 1.0, res[1].DistillIS[3], "no sampler log-prob: weight 1")
}
