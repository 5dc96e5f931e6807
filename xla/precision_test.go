package xla

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/stretchr/testify/require"
)

// testModelAs is testModel in precision p (the same seeded weights).
func testModelAs(t testing.TB, fields map[string]any, seed uint64, p Precision) *Model {
	t.Helper()
	mc := testConfig(t, fields)
	m, err := Load(mc, newMemWeights(testWeights(mc, seed)), p)
	require.NoError(t, err)
	return m
}

// logProbDiff returns the max and mean |a − b| over the positions after the first.
func logProbDiff(a, b []float32) (maxD, meanD float64) {
	for i := 1; i < len(a); i++ {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		maxD = max(maxD, d)
		meanD += d
	}
	return maxD, meanD / float64(len(a)-1)
}

// TestBF16LogProbs: the bf16 scorer's log-probs against the f32 scorer's on the
// same weights (bfloat16-representable, as a BF16 checkpoint's: the difference is
// the arithmetic alone), for the tiny llama and a qwen3-shaped tiny with q/k norms
// and biases, paged and contiguous caches. Every matrix product rounds its
// operands and its result to bfloat16 (relative error up to 2⁻⁹ each), and the
// test weights make peaked distributions (logits of a few units), so a log-prob
// moves by a few 1e-2 nats. Measured on 97 tokens: the Go backend (whose bf16 dot
// truncates its result) mean |Δ| 0.038–0.055, max 0.14–0.18 nats; XLA CPU mean
// 0.023–0.029, max 0.09–0.10. Held to mean 0.08 and max 0.3 nats, and the bf16 run
// must differ from f32 (it really ran in bf16).
func TestBF16LogProbs(t *testing.T) {
	backend := newTestBackend(t)
	if err := PrecisionBF16.CheckBackend(backend); err != nil {
		t.Skip(err)
	}
	for name, fields := range map[string]map[string]any{
		"llama": tinyFields(map[string]any{"torch_dtype": "bfloat16"}),
		"qwen3": tinyFields(map[string]any{"model_type": "qwen3", "attention_bias": true, "tie_word_embeddings": false, "torch_dtype": "bfloat16"}),
	} {
		t.Run(name, func(t *testing.T) {
			f32 := testModelAs(t, fields, 3, PrecisionF32)
			bf16 := testModelAs(t, fields, 3, PrecisionBF16)
			require.Equal(t, PrecisionBF16, bf16.Precision())
			tokens := testTokens(97, 265, 5)
			for _, bucket := range []bool{false, true} {
				want := scoreWith(t, backend, f32, tokens, bucket)
				got := scoreWith(t, backend, bf16, tokens, bucket)
				maxD, meanD := logProbDiff(want, got)
				t.Logf("bucket=%v: max |Δ| %.4f, mean |Δ| %.4f nats", bucket, maxD, meanD)
				require.Less(t, maxD, 0.3)
				require.Less(t, meanD, 0.08)
				require.Greater(t, maxD, 0.0, "bf16 gave f32's log-probs exactly")
			}
		})
	}
}

func scoreWith(t *testing.T, backend backends.Backend, m *Model, tokens []int32, bucket bool) []float32 {
	t.Helper()
	s, err := NewScorer(backend, m, ScorerOptions{Chunk: 32, BucketAttention: bucket})
	require.NoError(t, err)
	lp, cache, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	cache.Close()
	return lp
}

// bf16Options are the trainer options of the bf16 training tests: a frozen
// teacher (an EMA copy of a full bf16 policy is refused), KL against a reference.
func bf16Options(ref *Model) TrainerOptions {
	opts := resumeOptions(ref)
	opts.TeacherModel = TeacherModelConfig{Mode: TeacherFrozen, RefreshEvery: 3}
	opts.Optimizer.TotalSteps = 0
	opts.Optimizer.LR, opts.Optimizer.MinLR = 1e-3, 0
	return opts
}

// TestBF16TrainingTracksF32: 50 steps of the tiny preset in bf16 and in f32 from the
// same weights (a bfloat16 model directory), the same seed and batches. The bf16
// step's loss is computed from bf16 log-probs (TestBF16LogProbs' error) at weights
// that drift from f32's by bfloat16 rounding of each update, so the two losses are
// compared per step in absolute terms against the loss's own scale: |Δloss| ≤ 0.05 +
// 0.1·|loss_f32| at every step, and the mean over the run within 10% of f32's. The
// loss is a policy-gradient surrogate (near 0, not a learning curve), so what the
// runs learned is compared too: the change of every rollout's log-probs over the 50
// steps, bf16 against f32, must point the same way (cosine ≥ 0.9) and be as large
// (norm ratio 0.8–1.25).
func TestBF16TrainingTracksF32(t *testing.T) {
	if testing.Short() {
		t.Skip("50 training steps twice")
	}
	backend := newTestBackend(t)
	dir := filepath.Join(t.TempDir(), "model")
	_, err := dataInitModel(dir, "bfloat16")
	require.NoError(t, err)
	pool := rolloutPool(6, 11)
	logps := func(s *Scorer) []float64 {
		var out []float64
		for _, r := range pool {
			lp, c, err := s.Score(t.Context(), r.Tokens)
			require.NoError(t, err)
			c.Close()
			out = append(out, f64s(lp[1:])...)
		}
		return out
	}
	moved := map[Precision][]float64{}
	run := func(p Precision) []float64 {
		open := func() *Model {
			m, err := Open(dir, OpenOptions{Precision: p})
			require.NoError(t, err)
			return m
		}
		tr, err := NewTrainer(backend, open(), bf16Options(open()))
		require.NoError(t, err)
		before := logps(tr.Scorer())
		var losses []float64
		for range 50 {
			batch := []credit.Sequence{pool[tr.Rand().IntN(len(pool))], pool[tr.Rand().IntN(len(pool))]}
			met, err := tr.Step(t.Context(), batch)
			require.NoError(t, err)
			losses = append(losses, met.Loss)
		}
		after := logps(tr.Scorer())
		for i := range after {
			after[i] -= before[i]
		}
		moved[p] = after
		return losses
	}
	f32, bf16 := run(PrecisionF32), run(PrecisionBF16)
	mean := func(xs []float64) float64 {
		s := 0.0
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	worst := 0.0
	for i := range f32 {
		d := math.Abs(bf16[i] - f32[i])
		worst = max(worst, d)
		require.LessOrEqual(t, d, 0.05+0.1*math.Abs(f32[i]), "step %d: bf16 loss %g, f32 %g", i+1, bf16[i], f32[i])
	}
	t.Logf("loss f32 %.4f→%.4f, bf16 %.4f→%.4f (first/last 10 means); max |Δloss| %.4f", mean(f32[:10]), mean(f32[40:]), mean(bf16[:10]), mean(bf16[40:]), worst)
	require.InDelta(t, mean(f32), mean(bf16), 0.1*math.Abs(mean(f32)))
	a, b := moved[PrecisionF32], moved[PrecisionBF16]
	var ab, aa, bb float64
	for i := range a {
		ab, aa, bb = ab+a[i]*b[i], aa+a[i]*a[i], bb+b[i]*b[i]
	}
	cos, ratio := ab/math.Sqrt(aa*bb), math.Sqrt(bb/aa)
	t.Logf("log-prob change over the run: cosine %.4f, norm ratio bf16/f32 %.4f (f32 norm %.3f)", cos, ratio, math.Sqrt(aa))
	require.GreaterOrEqual(t, cos, 0.9)
	require.InDelta(t, 1, ratio, 0.25)
}

// TestBF16ExactResume: in bf16, 2N steps straight give bit for bit the weights (the
// bf16 copy and the float32 masters), moments, teacher and RNG of N steps, a
// checkpoint, a restore into a fresh bf16 model and N more steps; from a bfloat16
// model directory (masters in trainer/optimizer.safetensors beside the bf16 model
// file) and from a float32 one (the model file is the masters).
func TestBF16ExactResume(t *testing.T) {
	backend := newTestBackend(t)
	const N = 2
	for _, dtype := range []string{"bfloat16", "float32"} {
		t.Run(dtype, func(t *testing.T) {
			if dtype == "float32" && testing.Short() {
				// Three trainers compile their programs: minutes on XLA CPU (CI's -short
				// pass); the full pass runs it.
				t.Skip("the float32-directory variant runs without -short")
			}
			dir := filepath.Join(t.TempDir(), "model")
			_, err := dataInitModel(dir, dtype)
			require.NoError(t, err)
			pool := rolloutPool(6, 11)
			open := func(d string) *Model {
				m, err := Open(d, OpenOptions{Precision: PrecisionBF16})
				require.NoError(t, err)
				return m
			}
			straight, err := NewTrainer(backend, open(dir), bf16Options(open(dir)))
			require.NoError(t, err)
			require.NotNil(t, straight.masters)
			trainSteps(t, straight, pool, 2*N)

			first, err := NewTrainer(backend, open(dir), bf16Options(open(dir)))
			require.NoError(t, err)
			trainSteps(t, first, pool, N)
			files, err := checkpoint.ModelFiles(dir)
			require.NoError(t, err)
			ckdir, err := first.SaveCheckpoint(filepath.Join(t.TempDir(), "checkpoints"), files, checkpoint.TrainerState{}, 2)
			require.NoError(t, err)
			md, err := data.OpenModelDir(ckdir)
			require.NoError(t, err)
			v, err := md.Weights.Tensor("model.embed_tokens.weight")
			require.NoError(t, err)
			require.Equal(t, map[string]safetensors.Dtype{"bfloat16": safetensors.DtypeBF16, "float32": safetensors.DtypeF32}[dtype], v.Dtype, "the model file keeps the directory's dtype")
			md.Close()

			resumed, err := NewTrainer(backend, open(ckdir), bf16Options(open(dir)))
			require.NoError(t, err)
			_, err = resumed.Restore(ckdir)
			require.NoError(t, err)
			trainSteps(t, resumed, pool, N)

			require.Equal(t, bf16WeightsOf(straight.model), bf16WeightsOf(resumed.model), "bf16 weights")
			require.Equal(t, mastersOf(straight), mastersOf(resumed), "master weights")
			require.Equal(t, bf16WeightsOf(straight.teacher.model), bf16WeightsOf(resumed.teacher.model), "teacher weights")
			require.Equal(t, momentsOf(straight), momentsOf(resumed), "optimizer moments")
			require.Equal(t, straight.Rand().Uint64(), resumed.Rand().Uint64())
		})
	}
}

// bf16WeightsOf is every weight of m widened to float32, by name.
func bf16WeightsOf(m *Model) map[string][]float32 {
	out := map[string][]float32{}
	for v := range m.ctx.IterVariables() {
		out[v.ScopeAndName()] = float32sOf(v.MustValue())
	}
	return out
}

func mastersOf(tr *Trainer) [][]float32 {
	var out [][]float32
	for i, v := range tr.grad.params {
		out = append(out, tr.masters.hostValues(i, v))
	}
	return out
}

// TestBF16SamplerAgreesWithScorer: in bf16 the sampler (contiguous bf16 cache,
// batched decoding) and the scorer (paged bf16 cache) give the same log-probs of
// the generated tokens, so the trainer's credit sees the policy the gateway sampled
// from: keys and values are rounded to bfloat16 once, before any cache, so the two
// layouts attend over the same values. Measured max |Δ| 9.5e-7 nats (the Go
// backend); held to 1e-4.
func TestBF16SamplerAgreesWithScorer(t *testing.T) {
	backend := newTestBackend(t)
	m := testModelAs(t, tinyFields(map[string]any{"torch_dtype": "bfloat16"}), 21, PrecisionBF16)
	s, err := NewSampler(backend, m, 16)
	require.NoError(t, err)
	prompts := samplerPrompts(m.Config.VocabSize)
	out, err := s.Generate(t.Context(), prompts, SampleOptions{MaxNew: 24, Temperature: 1, Seed: 3})
	require.NoError(t, err)
	scorer, err := NewScorer(backend, m, ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	var worst float64
	for r, p := range prompts {
		full := append(slices.Clone(p), out[r].Tokens...)
		lp, c, err := scorer.Score(t.Context(), full)
		require.NoError(t, err)
		c.Close()
		for i := range out[r].Tokens {
			worst = max(worst, math.Abs(float64(out[r].PolicyLogProbs[i])-float64(lp[len(p)+i])))
		}
	}
	t.Logf("max |sampler − scorer| in bf16: %.2g nats", worst)
	require.Less(t, worst, 1e-4)
}

// bf16Round is round-to-nearest-even to bfloat16, in float64 (the reference).
func bf16Round(x float64) float64 {
	return float64(safetensors.BF16ToFloat32(safetensors.Float32ToBF16(float32(x))))
}

// TestBF16Convert: convert rounds float32 to bfloat16 to nearest on every backend
// (XLA natively; the pure-Go backend, which truncates, through Veltkamp's split),
// checked against safetensors.Float32ToBF16 (ties to even) on random values of
// every magnitude and on exact ties: every value within one bfloat16 step, and all
// but the rare double-rounding ties exactly equal (≥ 99.9%).
func TestBF16Convert(t *testing.T) {
	backend := newTestBackend(t)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 1 << 14
	xs := make([]float32, n)
	for i := range xs {
		xs[i] = float32(math.Ldexp(rng.Float64()*2-1, rng.IntN(40)-20))
		if i%16 == 0 { // an exact tie: a bfloat16 value plus half its step
			b := safetensors.BF16ToFloat32(safetensors.Float32ToBF16(xs[i]))
			xs[i] = math.Float32frombits(math.Float32bits(b) | 0x8000)
		}
	}
	out, err := ExecOnce(backend, func(x *Node) *Node { return ConvertDType(convert(x, dtypes.BFloat16), dtypes.Float32) }, xs)
	require.NoError(t, err)
	got := f32s(out)
	exact := 0
	for i, x := range xs {
		want := safetensors.BF16ToFloat32(safetensors.Float32ToBF16(x))
		if got[i] == want {
			exact++
			continue
		}
		step := math.Abs(float64(want)) * math.Pow(2, -7)
		require.LessOrEqual(t, math.Abs(float64(got[i]-want)), step, "x = %g: got %g, want %g", x, got[i], want)
	}
	t.Logf("%d of %d rounded exactly as Float32ToBF16", exact, n)
	require.GreaterOrEqual(t, float64(exact)/float64(n), 0.999)
}

// TestBF16Matmul: matmul under bf16 against a float64 reference of what it is
// documented to do: both operands rounded to bfloat16, the products summed exactly
// (float64 here; float32 on the device), the result rounded to bfloat16 (to
// nearest even on XLA; truncated by the pure-Go backend's dot, as docs/training.md
// says), and kept bfloat16 (the activation as autocast leaves it). Every output is within one bfloat16 step of the reference, and ≥ 90% equal
// it (the device's float32 accumulation can land a sum on the other side of a
// rounding boundary).
func TestBF16Matmul(t *testing.T) {
	backend := newTestBackend(t)
	const b, s, in, out = 1, 5, 48, 7
	rng := rand.New(rand.NewPCG(3, 4))
	x, w := make([]float32, b*s*in), make([]float32, out*in)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for i := range w {
		w[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(float32(rng.NormFloat64() / 7)))
	}
	wt := bf16Tensor(w, out, in)
	res, err := ExecOnce(backend, func(x, w *Node) *Node { return matmul(x, w) },
		tensors.FromFlatDataAndDimensions(x, b, s, in), wt)
	require.NoError(t, err)
	require.Equal(t, dtypes.BFloat16, res.DType(), "the product stays bfloat16, as autocast leaves it")
	got := float32sOf(res)
	_, truncates := backend.(*simplego.Backend)
	equal := 0
	for p := range s {
		for o := range out {
			sum := 0.0
			for k := range in {
				sum += bf16Round(float64(x[p*in+k])) * float64(w[o*in+k])
			}
			want := bf16Round(sum)
			if truncates {
				want = float64(math.Float32frombits(math.Float32bits(float32(sum)) &^ 0xffff))
			}
			if float64(got[p*out+o]) == want {
				equal++
				continue
			}
			require.LessOrEqual(t, math.Abs(float64(got[p*out+o])-want), math.Abs(want)*math.Pow(2, -7)+1e-30,
				"[%d, %d]: got %g, want %g (exact sum %g)", p, o, got[p*out+o], want, sum)
		}
	}
	t.Logf("%d of %d outputs equal the reference", equal, s*out)
	require.GreaterOrEqual(t, float64(equal), 0.9*s*out)
}

// TestBF16DirectoryKeptAsIs: a BF16 model directory opened in bf16 holds its file's
// values bit for bit (not widened and rounded again).
func TestBF16DirectoryKeptAsIs(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "model")
	_, err := dataInitModel(dir, "bfloat16")
	require.NoError(t, err)
	m, err := Open(dir, OpenOptions{Precision: PrecisionBF16})
	require.NoError(t, err)
	md, err := data.OpenModelDir(dir)
	require.NoError(t, err)
	defer md.Close()
	n := 0
	for v := range m.ctx.IterVariables() {
		require.Equal(t, dtypes.BFloat16, v.Shape().DType, v.ScopeAndName())
		view, err := md.Weights.Tensor(HFName(v.Scope(), v.Name()))
		require.NoError(t, err)
		require.Equal(t, safetensors.DtypeBF16, view.Dtype)
		want, err := view.Float32s()
		require.NoError(t, err)
		require.Equal(t, want, float32sOf(v.MustValue()), v.ScopeAndName())
		n++
	}
	require.Positive(t, n)
}
