package xla

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
)

// refAdamW is the float64 reference of one AdamW update of torch.optim.AdamW after
// torch.nn.utils.clip_grad_norm_ (decay on matrices only).
type refAdamW struct {
	cfg  AdamWConfig
	step int
	m, v [][]float64
}

func (r *refAdamW) apply(params, grads [][]float64, ranks []int) (norm float64) {
	if r.m == nil {
		for _, p := range params {
			r.m = append(r.m, make([]float64, len(p)))
			r.v = append(r.v, make([]float64, len(p)))
		}
	}
	for _, g := range grads {
		for _, x := range g {
			norm += x * x
		}
	}
	norm = math.Sqrt(norm)
	scale := 1.0
	if r.cfg.ClipNorm > 0 {
		scale = math.Min(1, r.cfg.ClipNorm/(norm+1e-6))
	}
	lr := r.cfg.LRAt(int64(r.step))
	r.step++
	bc1 := 1 - math.Pow(r.cfg.Beta1, float64(r.step))
	bc2 := 1 - math.Pow(r.cfg.Beta2, float64(r.step))
	for i, p := range params {
		for j := range p {
			g := grads[i][j] * scale
			r.m[i][j] = r.cfg.Beta1*r.m[i][j] + (1-r.cfg.Beta1)*g
			r.v[i][j] = r.cfg.Beta2*r.v[i][j] + (1-r.cfg.Beta2)*g*g
			if ranks[i] >= 2 {
				p[j] *= 1 - lr*r.cfg.WeightDecay
			}
			p[j] -= lr / bc1 * r.m[i][j] / (math.Sqrt(r.v[i][j])/math.Sqrt(bc2) + r.cfg.Eps)
		}
	}
	return norm
}

// TestAdamWMatchesReference runs the device AdamW and a float64 reference on a
// matrix and a vector for 8 steps through warm-up and cosine decay, with the clip
// active on some steps, and with clipping off; as one program (apply) and a group
// of parameters at a time (applyGroups, each parameter its own group).
func TestAdamWMatchesReference(t *testing.T) {
	backend := newTestBackend(t)
	for _, tc := range []struct {
		clip   float64
		groups bool
	}{{0.5, false}, {0, false}, {0.5, true}, {0, true}} {
		clip := tc.clip
		cfg := AdamWConfig{LR: 0.01, MinLR: 0.001, Beta1: 0.9, Beta2: 0.99, Eps: 1e-8, WeightDecay: 0.1,
			ClipNorm: clip, WarmupSteps: 2, TotalSteps: 6}
		require.NoError(t, cfg.Validate())
		dims := [][]int{{3, 4}, {5}}
		ranks := []int{2, 1}
		rng := rand.New(rand.NewPCG(1, uint64(clip*10)))
		var ref [][]float64
		var dev []*tensors.Tensor
		for _, d := range dims {
			n := prod(d)
			p := make([]float64, n)
			p32 := make([]float32, n)
			for i := range p {
				p32[i] = float32(rng.NormFloat64())
				p[i] = float64(p32[i])
			}
			ref = append(ref, p)
			dev = append(dev, tensors.FromFlatDataAndDimensions(p32, d...))
		}
		o, err := newAdamW(backend, cfg, dev, [][]int{{1}, {0}}, noMasters)
		require.NoError(t, err)
		r := &refAdamW{cfg: cfg}
		for step := range 8 {
			var g64 [][]float64
			var g32 []*tensors.Tensor
			for _, d := range dims {
				n := prod(d)
				g := make([]float64, n)
				gf := make([]float32, n)
				for i := range g {
					gf[i] = float32(rng.NormFloat64() * float64(step%3))
					g[i] = float64(gf[i])
				}
				g64, g32 = append(g64, g), append(g32, tensors.FromFlatDataAndDimensions(gf, d...))
			}
			wantNorm := r.apply(ref, g64, ranks)
			var norm, lr float64
			if tc.groups {
				norm, lr, err = o.applyGroups(dev, nil, g32, func(i int, p, low *tensors.Tensor) error {
					require.Nil(t, low)
					dev[i].FinalizeAll()
					dev[i] = p
					return nil
				})
			} else {
				dev, norm, lr, err = o.apply(dev, g32)
			}
			require.NoError(t, err)
			require.InDelta(t, wantNorm, norm, 1e-5*math.Max(1, wantNorm), "clip %g step %d: norm", clip, step)
			require.InDelta(t, cfg.LRAt(int64(step)), lr, 1e-12)
			for i := range dims {
				got := tensors.MustCopyFlatData[float32](dev[i])
				for j := range got {
					require.InDelta(t, ref[i][j], float64(got[j]), 2e-6, "clip %g groups %v step %d param %d[%d]", clip, tc.groups, step, i, j)
				}
			}
		}
	}
}

func TestLRSchedule(t *testing.T) {
	c := AdamWConfig{LR: 1, MinLR: 0.1, WarmupSteps: 4, TotalSteps: 14}
	require.InDelta(t, 0.25, c.LRAt(0), 1e-12)
	require.InDelta(t, 1, c.LRAt(3), 1e-12)
	require.InDelta(t, 1, c.LRAt(4), 1e-12)
	require.InDelta(t, 0.55, c.LRAt(9), 1e-12)
	require.InDelta(t, 0.1, c.LRAt(14), 1e-12)
	require.InDelta(t, 0.1, c.LRAt(100), 1e-12)
	c.TotalSteps = 0
	require.InDelta(t, 1, c.LRAt(100), 1e-12)
}

// segmentLogProb is the mean plain-context log-prob of tokens [a, b).
func segmentLogProb(t *testing.T, s *Scorer, tokens []int32, a, b int) float64 {
	t.Helper()
	lp, c, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	c.Close()
	var sum float64
	for i := a; i < b; i++ {
		sum += float64(lp[i])
	}
	return sum / float64(b-a)
}

// greedy extends seq by n tokens, each the most likely next token under m.
func greedy(t *testing.T, m *Model, seq []int32, n int) []int32 {
	t.Helper()
	cfg := m.Config
	e, err := mlctx.NewExec(newTestBackend(t), m.ctx, func(ctx *mlctx.Context, tok *Node) *Node {
		h := decoder(ctx, cfg, tok, ScalarZero(tok.Graph(), dtypes.Int32), chunkOnly{})
		w := weight(ctx.InAbsPath("/model/embed_tokens"), tok.Graph(), "weight")
		return ArgMax(dot(h, []int{2}, nil, w, []int{1}, nil), 2, dtypes.Int32) // [1, seq]
	})
	require.NoError(t, err)
	defer e.Finalize()
	out := slices.Clone(seq)
	for range n {
		r, err := e.Exec(tensors.FromFlatDataAndDimensions(slices.Clone(out), 1, len(out)))
		require.NoError(t, err)
		next := tensors.MustCopyFlatData[int32](r[0])
		out = append(out, next[len(next)-1])
	}
	return out[len(seq):]
}

// TestHintRaisesOrLowersSegment is the core behaviour: a segment whose hint makes its
// tokens more likely (teacher log-probs above the student's) gets its plain-context
// log-prob raised by a few training steps, and a hint that makes them less likely
// gets it lowered. For "raise" the segment is what the model says greedily after the
// hint (so the hint makes it likely); for "lower" it is what the model says greedily
// without it, and the hint is a distraction. Both are checked to have Δ of the
// intended sign on every token before training.
func TestHintRaisesOrLowersSegment(t *testing.T) {
	backend := newTestBackend(t)
	const T, a, b = 40, 24, 28
	probe := testModel(t, smallFields(), 31)
	vocab := probe.Config.VocabSize
	ps, err := NewScorer(backend, probe, ScorerOptions{Chunk: 64})
	require.NoError(t, err)
	prefix := testTokens(a, vocab, 32)
	tail := testTokens(T-b, vocab, 33)
	type sample struct {
		tokens []int32
		hint   []int32
		s      []float32
	}
	build := func(hint []int32, withHint bool) sample {
		var seg []int32
		if withHint {
			seg = greedy(t, probe, append(slices.Clone(prefix), hint...), b-a)
		} else {
			seg = greedy(t, probe, prefix, b-a)
		}
		tokens := append(append(slices.Clone(prefix), seg...), tail...)
		s, c, err := ps.Score(t.Context(), tokens)
		require.NoError(t, err)
		defer c.Close()
		q, err := ps.ScoreHinted(t.Context(), tokens, c, []credit.Hint{{InsertAt: a, End: b, Tokens: hint}})
		require.NoError(t, err)
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := a; i < b; i++ {
			d := float64(q[0][i-a] - s[i])
			lo, hi = math.Min(lo, d), math.Max(hi, d)
		}
		if withHint && lo <= 0 || !withHint && hi >= 0 {
			return sample{}
		}
		t.Logf("hint %v: Δ over the segment in [%.3f, %.3f] nats", hint, lo, hi)
		return sample{tokens, hint, s}
	}
	var up, down sample
	for k := 0; k < 32 && (up.tokens == nil || down.tokens == nil); k++ {
		hint := testTokens(6, vocab, uint64(500+k))
		if up.tokens == nil {
			up = build(hint, true)
		}
		if down.tokens == nil {
			down = build(hint, false)
		}
	}
	require.NotNil(t, up.tokens, "no hint raises every token of its greedy segment")
	require.NotNil(t, down.tokens, "no hint lowers every token of the plain greedy segment")

	for _, tc := range []struct {
		name string
		hint []int32
		sign float64
		smp  sample
	}{{"raise", up.hint, 1, up}, {"lower", down.hint, -1, down}} {
		tokens, s := tc.smp.tokens, tc.smp.s
		t.Run(tc.name, func(t *testing.T) {
			m := testModel(t, smallFields(), 31)
			cfg := credit.DefaultConfig()
			cfg.LambdaOut, cfg.LambdaHint = 0, 1
			tr, err := NewTrainer(backend, m, TrainerOptions{Chunk: 16, Scorer: ScorerOptions{Chunk: 64}, Credit: cfg,
				Optimizer:    AdamWConfig{LR: 3e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, ClipNorm: 1},
				TeacherModel: TeacherModelConfig{Mode: TeacherFrozen}})
			require.NoError(t, err)
			r := credit.Sequence{ID: "r", Tokens: tokens, Sampler: make([]float64, T), Trainable: make([]bool, T),
				Hints: []credit.Hint{{InsertAt: a, End: b, Tokens: tc.hint}}}
			for i := range T {
				r.Sampler[i] = math.NaN()
				if i >= a && i < b {
					r.Trainable[i], r.Sampler[i] = true, float64(s[i]) // ρ = 1
				}
			}
			before := segmentLogProb(t, tr.Scorer(), tokens, a, b)
			for range 5 {
				met, err := tr.Step(t.Context(), []credit.Sequence{r})
				require.NoError(t, err)
				require.Equal(t, b-a, met.Credit.HintTokens)
			}
			after := segmentLogProb(t, tr.Scorer(), tokens, a, b)
			t.Logf("%s: mean plain log-prob of the segment %.4f → %.4f nats", tc.name, before, after)
			require.Greater(t, tc.sign*(after-before), 0.01)
		})
	}
}

// weightsOf copies every variable of m to the host.
func weightsOf(m *Model) [][]float32 {
	var out [][]float32
	for _, v := range variables(m) {
		out = append(out, float32sOf(v.MustValue()))
	}
	return out
}

// stepMoves takes one step of tr on pool and returns how far it moved each weight of m.
func stepMoves(t *testing.T, tr *Trainer, m *Model, pool []credit.Sequence) [][]float32 {
	t.Helper()
	moved := weightsOf(m)
	_, err := tr.Step(t.Context(), pool)
	require.NoError(t, err)
	for i, after := range weightsOf(m) {
		for j := range after {
			moved[i][j] = after[j] - moved[i][j]
		}
	}
	return moved
}

// TestTeacherModes checks the frozen teacher refreshes every K steps and the EMA
// teacher follows θ_T + rate·(θ − θ_T), and that the live teacher keeps no weights.
func TestTeacherModes(t *testing.T) {
	backend := newTestBackend(t)
	tokens := testTokens(40, 265, 41)
	r := credit.Sequence{ID: "r", Tokens: tokens, Sampler: make([]float64, 40), Trainable: make([]bool, 40),
		Reward: 1, HasReward: true, TaskID: "t",
		Hints: []credit.Hint{{InsertAt: 20, End: 30, Tokens: testTokens(3, 265, 42)}}}
	for i := range 40 {
		r.Sampler[i] = -5
		r.Trainable[i] = i >= 16
	}
	newTr := func(tc TeacherModelConfig) *Trainer {
		m := testModel(t, smallFields(), 43)
		tr, err := NewTrainer(backend, m, TrainerOptions{Chunk: 16, Scorer: ScorerOptions{Chunk: 32},
			Credit: credit.DefaultConfig(), Optimizer: AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, TeacherModel: tc})
		require.NoError(t, err)
		return tr
	}
	step := func(tr *Trainer) {
		_, err := tr.Step(t.Context(), []credit.Sequence{r})
		require.NoError(t, err)
	}

	live := newTr(TeacherModelConfig{Mode: TeacherLive})
	require.Nil(t, live.teacher)
	step(live)

	frozen := newTr(TeacherModelConfig{Mode: TeacherFrozen, RefreshEvery: 2})
	w0 := weightsOf(frozen.model)
	step(frozen)
	require.Equal(t, w0, weightsOf(frozen.teacher.model), "refreshed before step 2")
	require.NotEqual(t, w0, weightsOf(frozen.model))
	step(frozen)
	require.Equal(t, weightsOf(frozen.model), weightsOf(frozen.teacher.model), "not refreshed at step 2")

	ema := newTr(TeacherModelConfig{Mode: TeacherEMA, EMARate: 0.25})
	prev := weightsOf(ema.teacher.model)
	for range 2 {
		step(ema)
		cur, got := weightsOf(ema.model), weightsOf(ema.teacher.model)
		for i := range cur {
			for j := range cur[i] {
				want := prev[i][j] + (cur[i][j]-prev[i][j])*0.25
				require.InDelta(t, want, got[i][j], 1e-6)
			}
		}
		prev = got
	}

	require.Error(t, TeacherModelConfig{Mode: "warm"}.Validate())
	require.Error(t, TeacherModelConfig{Mode: TeacherEMA, EMARate: 0}.Validate())
}

// TestParamGroups: a layer's variables are one update group, every other variable
// its own, smallest group first.
func TestParamGroups(t *testing.T) {
	m := testModel(t, tinyFields(nil), 1)
	params := trainables(m)
	groups := paramGroups(params)
	seen := map[int]bool{}
	last := 0
	for _, g := range groups {
		size, layer := 0, ""
		for _, i := range g {
			require.False(t, seen[i], "variable %d in two groups", i)
			seen[i] = true
			size += params[i].Shape().Size()
			m := layerScope.FindStringSubmatch(params[i].Scope() + "/")
			if len(g) > 1 {
				require.NotNil(t, m, "%s grouped with others outside a layer", params[i].Scope())
				if layer == "" {
					layer = m[1]
				}
				require.Equal(t, layer, m[1], "one group, two layers")
			}
		}
		require.GreaterOrEqual(t, size, last, "groups smallest first")
		last = size
	}
	require.Len(t, seen, len(params))
	require.Equal(t, m.Config.NumHiddenLayers+2, len(groups), "a group per layer, the embedding and the final norm")
	alone := map[string]bool{}
	for _, g := range groups {
		if len(g) == 1 {
			alone[params[g[0]].Scope()] = true
		}
	}
	require.True(t, alone["/model/embed_tokens"] && alone["/model/norm"], "the embedding and the final norm alone: %v", alone)
}
