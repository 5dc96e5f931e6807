package xla

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// rolloutPool is a few random rollouts over the byte vocabulary: trainable runs,
// sampler log-probs, rewards in two task groups and a lone task, and hints.
func rolloutPool(n int, seed uint64) []credit.Sequence {
	rng := rand.New(rand.NewPCG(seed, 1))
	var pool []credit.Sequence
	for i := range n {
		T := 40 + rng.IntN(50)
		r := credit.Sequence{ID: fmt.Sprintf("r%d", i), TaskID: []string{"a", "b", "lone"}[i%3], Tokens: testTokens(T, 265, seed+uint64(i)),
			Sampler: make([]float64, T), Trainable: make([]bool, T), Reward: float64(rng.IntN(2)), HasReward: i%4 != 3}
		for t := range T {
			r.Sampler[t] = math.NaN()
			if t > 10 && rng.IntN(4) > 0 {
				r.Trainable[t], r.Sampler[t] = true, -0.1-3*rng.Float64()
			}
		}
		a := 12 + rng.IntN(T-20)
		r.Hints = []credit.Hint{{InsertAt: a, End: a + 1 + rng.IntN(min(10, T-a-1)), Tokens: testTokens(3+rng.IntN(4), 265, seed+100+uint64(i))}}
		pool = append(pool, r)
	}
	return pool
}

func resumeOptions(ref *Model) TrainerOptions {
	cfg := credit.DefaultConfig()
	cfg.KLBeta = 0.05
	return TrainerOptions{Budget: 64, Chunk: 16, Scorer: ScorerOptions{Chunk: 32}, Credit: cfg, Ref: ref, Seed: 7,
		Optimizer: AdamWConfig{LR: 1e-2, MinLR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01,
			ClipNorm: 1, WarmupSteps: 2, TotalSteps: 6},
		TeacherModel: TeacherModelConfig{Mode: TeacherEMA, EMARate: 0.3}}
}

// trainSteps runs n steps, each on two rollouts of pool drawn with the trainer's
// own random stream (so a resume must restore it).
func trainSteps(t *testing.T, tr *Trainer, pool []credit.Sequence, n int) {
	t.Helper()
	for range n {
		batch := []credit.Sequence{pool[tr.Rand().IntN(len(pool))], pool[tr.Rand().IntN(len(pool))]}
		_, err := tr.Step(t.Context(), batch)
		require.NoError(t, err)
	}
}

// momentsOf are tr's AdamW moments (zeros before the first update made them).
func momentsOf(tr *Trainer) [][]float32 {
	var out [][]float32
	for i := range tr.opt.m {
		dims := tr.grad.params[i].Shape().Dimensions
		out = append(out, f32s(moment(tr.opt.m[i], dims)), f32s(moment(tr.opt.v[i], dims)))
	}
	return out
}

// TestExactResume: 2N steps straight give bit for bit the weights, moments, teacher,
// baselines and RNG of N steps, a checkpoint, a fresh process's restore and N more
// steps; for a float32 model and for a bfloat16 one (whose checkpoint keeps float32
// master weights beside the bf16 model file); and from a checkpoint in the layout of
// older versions (optimizer and teacher files at the top level, not in trainer/).
// The checkpointed and the resumed trainers are prepared as the daemon prepares them
// (Trainer.Prepare: zero moments made, restored ones moved to the device), the
// straight one is not: preparing changes nothing a step computes.
func TestExactResume(t *testing.T) {
	backend := newTestBackend(t)
	const N = 2
	for _, variant := range []string{"float32", "bfloat16", "float32-old-layout"} {
		dtype, oldLayout := strings.CutSuffix(variant, "-old-layout")
		t.Run(variant, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "model")
			_, err := dataInitModel(dir, dtype)
			require.NoError(t, err)
			pool := rolloutPool(6, 11)
			open := func(d string) *Model {
				m, err := Open(d, OpenOptions{})
				require.NoError(t, err)
				return m
			}

			straight, err := NewTrainer(backend, open(dir), resumeOptions(open(dir)))
			require.NoError(t, err)
			initial := weightsOf(straight.model)
			trainSteps(t, straight, pool, 2*N)
			require.NotEqual(t, initial, weightsOf(straight.model))

			first, err := NewTrainer(backend, open(dir), resumeOptions(open(dir)))
			require.NoError(t, err)
			requirePrepared(t, first)
			trainSteps(t, first, pool, N)
			files, err := checkpoint.ModelFiles(dir)
			require.NoError(t, err)
			root := filepath.Join(t.TempDir(), "checkpoints")
			ck, err := first.Checkpoint(files, checkpoint.TrainerState{CodeVersion: "test", Config: "x: 1\n"})
			require.NoError(t, err)
			if oldLayout {
				for _, n := range []string{checkpoint.OptimizerFileName, checkpoint.TeacherFileName} {
					ck.Tensors[filepath.Base(n)] = ck.Tensors[n]
					delete(ck.Tensors, n)
				}
			}
			ckdir, err := checkpoint.Write(root, ck, 2)
			require.NoError(t, err)
			_, err = os.Stat(filepath.Join(ckdir, checkpoint.TrainerDirName))
			require.Equal(t, oldLayout, os.IsNotExist(err), "trainer/ exists only in the new layout")
			first = nil // the "kill"

			latest, st, err := checkpoint.Latest(root, zerolog.Nop())
			require.NoError(t, err)
			require.Equal(t, ckdir, latest)
			require.EqualValues(t, N, st.Step)
			md, err := data.OpenModelDir(latest)
			require.NoError(t, err)
			want := safetensors.DtypeF32
			if dtype == "bfloat16" {
				want = safetensors.DtypeBF16
			}
			v, err := md.Weights.Tensor("model.embed_tokens.weight")
			require.NoError(t, err)
			require.Equal(t, want, v.Dtype)
			md.Close()

			resumed, err := NewTrainer(backend, open(latest), resumeOptions(open(dir)))
			require.NoError(t, err)
			rst, err := resumed.Restore(latest)
			require.NoError(t, err)
			require.Equal(t, "test", rst.CodeVersion)
			require.EqualValues(t, N, resumed.StepCount())
			requirePrepared(t, resumed)
			trainSteps(t, resumed, pool, N)

			require.Equal(t, weightsOf(straight.model), weightsOf(resumed.model), "policy weights")
			require.Equal(t, weightsOf(straight.teacher.model), weightsOf(resumed.teacher.model), "teacher weights")
			require.Equal(t, momentsOf(straight), momentsOf(resumed), "optimizer moments")
			require.Equal(t, straight.baselines, resumed.baselines)
			require.Equal(t, straight.StepCount(), resumed.StepCount())
			require.Equal(t, straight.Rand().Uint64(), resumed.Rand().Uint64())
		})
	}
}

// requirePrepared runs tr.Prepare and checks what it leaves: every weight and every
// optimizer moment on the device with no host copy beside it.
func requirePrepared(t *testing.T, tr *Trainer) {
	t.Helper()
	require.NoError(t, tr.Prepare())
	onDevice := func(what string, x *tensors.Tensor) {
		require.NotNil(t, x, what)
		require.True(t, x.IsOnDevice(deviceOf(x)) && !x.HasLocal(), "%s on the device only", what)
	}
	for v := range tr.model.ctx.IterVariables() {
		onDevice(v.ScopeAndName(), v.MustValue())
	}
	for i := range tr.opt.m {
		onDevice(fmt.Sprintf("moment m[%d]", i), tr.opt.m[i])
		onDevice(fmt.Sprintf("moment v[%d]", i), tr.opt.v[i])
	}
}

// TestCheckpointCorruptFallsBack: a corrupted latest checkpoint is skipped (logged)
// and Restore refuses it; the previous one restores.
func TestCheckpointCorruptFallsBack(t *testing.T) {
	backend := newTestBackend(t)
	dir := filepath.Join(t.TempDir(), "model")
	_, err := dataInitModel(dir, "float32")
	require.NoError(t, err)
	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	opts := resumeOptions(nil)
	opts.Credit.KLBeta = 0
	tr, err := NewTrainer(backend, m, opts)
	require.NoError(t, err)
	files, err := checkpoint.ModelFiles(dir)
	require.NoError(t, err)
	root := t.TempDir()
	pool := rolloutPool(3, 5)
	var dirs []string
	for range 2 {
		trainSteps(t, tr, pool, 1)
		d, err := tr.SaveCheckpoint(root, files, checkpoint.TrainerState{}, 3)
		require.NoError(t, err)
		dirs = append(dirs, d)
	}
	f := filepath.Join(dirs[1], checkpoint.OptimizerFileName)
	b, err := os.ReadFile(f)
	require.NoError(t, err)
	b[len(b)-1] ^= 1
	require.NoError(t, os.WriteFile(f, b, 0o644))
	_, err = tr.Restore(dirs[1])
	require.Error(t, err)
	latest, st, err := checkpoint.Latest(root, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, dirs[0], latest)
	require.EqualValues(t, 1, st.Step)
	m2, err := Open(latest, OpenOptions{})
	require.NoError(t, err)
	tr2, err := NewTrainer(backend, m2, opts)
	require.NoError(t, err)
	_, err = tr2.Restore(latest)
	require.NoError(t, err)
	require.EqualValues(t, 1, tr2.StepCount())
}

func f32s(t *tensors.Tensor) []float32 { return tensors.MustCopyFlatData[float32](t) }
