package credit

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

var nan = math.NaN()

// handRollout is a 4-token rollout whose credit is worked out by hand in the tests.
func handRollout() Sequence {
	return Sequence{
		ID: "r", TaskID: "t",
		Student:   []float64{-1, -2, -0.5, -1},
		Sampler:   []float64{nan, -2, -1, nan},
		Trainable: []bool{false, true, true, true},
		Hints:     []Hint{{InsertAt: 1, End: 4, Teacher: []float64{-0.5, -3, -1}, EmptyTeacher: []float64{-1, -3, -2}}},
	}
}

func TestStepByHand(t *testing.T) {
	e := math.Exp(0.5)
	tests := []struct {
		name   string
		mod    func(*Config)
		delta  []float64
		ahint  []float64
		weight []float64
	}{
		{name: "clip, base student", mod: func(*Config) {},
			// Δ = q − s = [−0.5+2, −3+0.5, −1+1] = [1.5, −2.5, 0]; clip at 2.
			delta: []float64{nan, 1.5, -2.5, 0}, ahint: []float64{0, 1.5, -2, 0},
			// A = 0.5·A_hint (no outcome); ρ = [1, e^0.5, 1 (μ null)]; N = 4.
			weight: []float64{0, 0.75 / 4, -1 * e / 4, 0}},
		{name: "tanh", mod: func(c *Config) { c.Gate = GateTanh },
			delta: []float64{nan, 1.5, -2.5, 0}, ahint: []float64{0, 2 * math.Tanh(0.75), 2 * math.Tanh(-1.25), 0},
			weight: []float64{0, 0.5 * 2 * math.Tanh(0.75) / 4, 0.5 * 2 * math.Tanh(-1.25) * e / 4, 0}},
		{name: "base empty hint", mod: func(c *Config) { c.Base = BaseEmptyHint },
			// Δ = q(h) − q(∅) = [0.5, 0, 1].
			delta: []float64{nan, 0.5, 0, 1}, ahint: []float64{0, 0.5, 0, 1},
			weight: []float64{0, 0.25 / 4, 0, 0.5 / 4}},
		{name: "rho truncated", mod: func(c *Config) { c.RhoMax = 1.2 },
			delta: []float64{nan, 1.5, -2.5, 0}, ahint: []float64{0, 1.5, -2, 0},
			weight: []float64{0, 0.75 / 4, -1 * 1.2 / 4, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mod(&cfg)
			res, st, err := Step(cfg, []Sequence{handRollout()}, NewBaselines(), 4)
			require.NoError(t, err)
			r := res[0]
			require.Zero(t, r.AOut, "no reward, no outcome term")
			for i := range tt.delta {
				if math.IsNaN(tt.delta[i]) {
					require.True(t, math.IsNaN(r.Delta[i]), "Δ[%d]", i)
				} else {
					require.InDelta(t, tt.delta[i], r.Delta[i], 1e-12, "Δ[%d]", i)
				}
				require.InDelta(t, tt.ahint[i], r.AHint[i], 1e-12, "A_hint[%d]", i)
				require.InDelta(t, tt.weight[i], r.Weight[i], 1e-12, "weight[%d]", i)
			}
			require.Equal(t, 3, st.Tokens)
			require.Equal(t, 3, st.HintTokens)
		})
	}
}

func TestOutcomeAdvantage(t *testing.T) {
	mk := func(id, task string, reward float64, has bool) Sequence {
		r := handRollout()
		r.ID, r.TaskID, r.Reward, r.HasReward, r.Hints = id, task, reward, has, nil
		return r
	}
	rs := []Sequence{
		mk("a1", "A", 1, true), mk("a2", "A", 0, true), mk("a3", "A", 0.5, true), // leave-one-out
		mk("a4", "A", 0, false),  // null reward: 0, and not part of A's mean
		mk("b1", "B", 1, true),   // alone: running mean of task B
		mk("c1", "C", 0.2, true), // alone, task never seen: global mean
		mk("n1", "", 0.7, true),  // no task: global mean
	}
	b := NewBaselines()
	b.Task["B"] = 0.4
	b.Global, b.Seen = 0.5, true
	cfg := DefaultConfig()
	res, st, err := Step(cfg, rs, b, 100)
	require.NoError(t, err)
	want := []float64{1 - 0.25, 0 - 0.75, 0.5 - 0.5, 0, 1 - 0.4, 0.2 - 0.5, 0.7 - 0.5}
	for i, w := range want {
		require.InDelta(t, w, res[i].AOut, 1e-12, rs[i].ID)
		// The outcome advantage reaches every trainable token; ρ_1 = 1.
		require.InDelta(t, cfg.LambdaOut*w/100, res[i].Weight[1], 1e-12, rs[i].ID)
	}
	require.InDelta(t, (0.75+0.75+0+0.6+0.3+0.2)/6, st.AOutAbsMean, 1e-12)

	// Baselines moved toward the step's rewards at rate 0.1, in rollout order.
	require.InDelta(t, 0.4+0.1*(1-0.4), b.Task["B"], 1e-12)
	require.InDelta(t, 0.2, b.Task["C"], 1e-12, "a new task starts at its reward")
	g := 0.5
	for _, r := range []float64{1, 0, 0.5, 1, 0.2, 0.7} {
		g += 0.1 * (r - g)
	}
	require.InDelta(t, g, b.Global, 1e-12)

	// With nothing seen yet, a lone rollout has no outcome advantage.
	res, _, err = Step(cfg, []Sequence{mk("x", "X", 1, true)}, NewBaselines(), 10)
	require.NoError(t, err)
	require.Zero(t, res[0].AOut)
}

func TestNoSamplerLogProbs(t *testing.T) {
	r := handRollout()
	r.Sampler = []float64{nan, nan, nan, nan}
	cfg := DefaultConfig()
	res, st, err := Step(cfg, []Sequence{r}, NewBaselines(), 4)
	require.NoError(t, err)
	require.True(t, res[0].Skipped)
	require.Equal(t, []float64{0, 0, 0, 0}, res[0].Weight)
	require.Equal(t, 1, st.NoSampler)
	require.Equal(t, 1, st.Skipped)

	cfg.AllowNoSampler = true
	res, st, err = Step(cfg, []Sequence{r}, NewBaselines(), 4)
	require.NoError(t, err)
	require.False(t, res[0].Skipped)
	require.Equal(t, []float64{0, 1, 1, 1}, res[0].Rho, "importance weight 1 without μ")
	require.Equal(t, 1, st.NoSampler)
	require.Zero(t, st.Skipped)
}

// TestOverlappingSpansFirstWins: where spans overlap, a position's teacher is the
// first span covering it, for the sampled-token Δ as for the divergence term's
// teacher row (xla's distillTerms) and the credit viewer.
func TestOverlappingSpansFirstWins(t *testing.T) {
	r := handRollout()
	r.Hints = append(r.Hints, Hint{InsertAt: 2, End: 3, Teacher: []float64{-0.1}})
	res, _, err := Step(DefaultConfig(), []Sequence{r}, NewBaselines(), 4)
	require.NoError(t, err)
	// t=2: the first span's Δ = −3 − (−0.5) = −2.5 (clipped −2); the second's 0.4 is not used.
	require.InDelta(t, -2.5, res[0].Delta[2], 1e-12)
	require.InDelta(t, -2, res[0].AHint[2], 1e-12)
	// Swapped, the other span's teacher wins.
	r.Hints[0], r.Hints[1] = r.Hints[1], r.Hints[0]
	res, _, err = Step(DefaultConfig(), []Sequence{r}, NewBaselines(), 4)
	require.NoError(t, err)
	require.InDelta(t, 0.4, res[0].Delta[2], 1e-12)
}

func TestLossReference(t *testing.T) {
	cfg := DefaultConfig()
	cfg.KLBeta = 0.1
	r := handRollout()
	r.Ref = []float64{-1, -1.5, -0.7, -1.2}
	res, _, err := Step(cfg, []Sequence{r}, NewBaselines(), 4)
	require.NoError(t, err)
	logp := []float64{-1.1, -1.9, -0.6, -0.9}
	var want float64
	for i, w := range res[0].Weight {
		want -= w * logp[i]
		if r.Trainable[i] {
			x := r.Ref[i] - logp[i]
			want += 0.1 / 4 * (math.Exp(x) - x - 1)
		}
	}
	require.InDelta(t, want, Loss(cfg, []Sequence{r}, res, [][]float64{logp}, 4), 1e-15)
	// k3 is zero when the policy equals the reference.
	cfg.LambdaHint, cfg.LambdaOut = 0, 0
	res, _, err = Step(cfg, []Sequence{r}, NewBaselines(), 4)
	require.NoError(t, err)
	require.Zero(t, Loss(cfg, []Sequence{r}, res, [][]float64{r.Ref}, 4))
}

func TestStats(t *testing.T) {
	// 200 hint tokens: Δ = 0.01 everywhere but two pivot tokens of Δ = 3.
	T := 201
	r := Sequence{ID: "p", Student: make([]float64, T), Sampler: make([]float64, T), Trainable: make([]bool, T)}
	h := Hint{InsertAt: 1, End: T, Teacher: make([]float64, T-1)}
	for t := 0; t < T; t++ {
		r.Student[t], r.Sampler[t], r.Trainable[t] = -5, -5, t > 0
	}
	for i := range h.Teacher {
		h.Teacher[i] = -5 + 0.01
	}
	h.Teacher[10], h.Teacher[20] = -2, -2
	r.Hints = []Hint{h}
	_, st, err := Step(DefaultConfig(), []Sequence{r}, NewBaselines(), 1000)
	require.NoError(t, err)
	require.Equal(t, 200, st.HintTokens)
	require.InDelta(t, 3, st.DeltaAbsMax, 1e-9)
	require.InDelta(t, 0.01, st.DeltaAbsP50, 1e-9)
	require.InDelta(t, 2.0/200, st.ClipFraction, 1e-12)
	require.InDelta(t, 6/(6+198*0.01), st.TopShare, 1e-9, "the top 1%% (2 tokens) hold most of Σ|Δ|")
	require.InDelta(t, 1, st.RhoP99, 1e-12)
	require.Zero(t, st.RhoTruncated)
}

func TestInputErrors(t *testing.T) {
	tests := map[string]func(r *Sequence){
		"length mismatch":   func(r *Sequence) { r.Sampler = r.Sampler[:2] },
		"span out of range": func(r *Sequence) { r.Hints[0].End = 9 },
		"teacher length":    func(r *Sequence) { r.Hints[0].Teacher = r.Hints[0].Teacher[:1] },
		"NaN student":       func(r *Sequence) { r.Student[2] = nan },
		"positive teacher":  func(r *Sequence) { r.Hints[0].Teacher[0] = 0.5 },
		"infinite reward":   func(r *Sequence) { r.Reward, r.HasReward = math.Inf(1), true },
		"positive sampler":  func(r *Sequence) { r.Sampler[1] = 2 },
	}
	for name, mod := range tests {
		t.Run(name, func(t *testing.T) {
			r := handRollout()
			mod(&r)
			_, _, err := Step(DefaultConfig(), []Sequence{r}, NewBaselines(), 4)
			require.ErrorContains(t, err, `credit rollout "r"`)
		})
	}
	_, _, err := Step(DefaultConfig(), nil, NewBaselines(), 0)
	require.ErrorContains(t, err, "token budget")
	bad := DefaultConfig()
	bad.Clip = 0
	_, _, err = Step(bad, nil, NewBaselines(), 1)
	require.ErrorContains(t, err, "clip:")
}

// FuzzStep checks the invariants of the credit math on arbitrary inputs: everything
// finite, the hint advantage bounded by the clip, zero hint credit when the hint changes
// nothing, the weight sign following the advantage.
func FuzzStep(f *testing.F) {
	f.Add(int64(1), 1.5, -2.5, 0.3, 2.0, true, 1.0)
	f.Add(int64(7), 0.0, 0.0, 0.0, 0.5, false, 0.0)
	f.Add(int64(-3), 40.0, -90.0, 1e-9, 1e3, true, -7.0)
	f.Fuzz(func(t *testing.T, seed int64, d1, d2, d3, clip float64, tanh bool, reward float64) {
		for _, x := range []float64{d1, d2, d3, clip, reward} {
			if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > 1e6 {
				t.Skip()
			}
		}
		clip = math.Abs(clip)
		if clip < 1e-6 {
			clip = 1e-6
		}
		cfg := DefaultConfig()
		cfg.Clip = clip
		if tanh {
			cfg.Gate = GateTanh
		}
		r := handRollout()
		deltas := []float64{d1, d2, d3}
		same := handRollout()
		for i, d := range deltas {
			// teacher = student + Δ, kept a log-prob (≤ 0).
			q := math.Min(0, r.Student[i+1]+d)
			r.Hints[0].Teacher[i] = q
			same.Hints[0].Teacher[i] = same.Student[i+1]
		}
		r.Reward, r.HasReward = reward, seed%2 == 0
		res, st, err := Step(cfg, []Sequence{r, same}, NewBaselines(), 3)
		require.NoError(t, err)
		for _, c := range res {
			for tt := range c.Weight {
				for _, v := range []float64{c.AHint[tt], c.Adv[tt], c.Rho[tt], c.Weight[tt]} {
					require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "finite")
				}
				require.LessOrEqual(t, math.Abs(c.AHint[tt]), clip*(1+1e-12), "bounded by the clip")
				if c.Rho[tt] > 0 && c.Adv[tt] != 0 {
					require.Equal(t, math.Signbit(c.Adv[tt]), math.Signbit(c.Weight[tt]), "weight keeps the advantage's sign")
				}
			}
		}
		for tt := range res[1].AHint {
			require.Zero(t, res[1].AHint[tt], "no hint credit when the hint changes nothing")
		}
		require.False(t, math.IsNaN(st.DeltaAbsMean))
	})
}

func TestBaselineNoneIsSFT(t *testing.T) {
	// Two demonstrations of one task, no sampler log-probs: with the group baseline
	// their advantages cancel; with none, each policy token gets advantage R = 1 and
	// weight 1/N (ρ = 1 without a sampler).
	demo := func(id string) Sequence {
		return Sequence{ID: id, TaskID: "t", Student: []float64{-1, -2, -3}, Sampler: []float64{nan, nan, nan},
			Trainable: []bool{false, true, true}, Reward: 1, HasReward: true}
	}
	cfg := DefaultConfig()
	cfg.LambdaHint, cfg.AllowNoSampler = 0, true
	res, _, err := Step(cfg, []Sequence{demo("a"), demo("b")}, &Baselines{}, 4)
	require.NoError(t, err)
	require.Equal(t, []float64{0, 0, 0}, res[0].Weight, "group baseline: equal rewards cancel")

	cfg.Baseline = BaselineNone
	res, _, err = Step(cfg, []Sequence{demo("a"), demo("b")}, &Baselines{}, 4)
	require.NoError(t, err)
	for _, r := range res {
		require.Equal(t, 1.0, r.AOut)
		require.Equal(t, []float64{0, 0.25, 0.25}, r.Weight)
	}
	cfg.Baseline = "mean"
	require.ErrorContains(t, cfg.Validate(), `baseline: "mean"`)
	cfg.Baseline = ""
	require.NoError(t, cfg.Validate())
	require.Equal(t, BaselineGroup, cfg.Baseline)
}
