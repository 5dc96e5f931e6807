package xla

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/stretchr/testify/require"
)

func TestLoRAConfigValidate(t *testing.T) {
	ok := LoRAConfig{Rank: 8, Alpha: 16, Targets: []string{"q_proj", "down_proj"}}
	require.NoError(t, ok.Validate())
	require.NoError(t, LoRAConfig{}.Validate(), "off")
	for _, tc := range []struct {
		cfg  LoRAConfig
		want string
	}{
		{LoRAConfig{Rank: -1, Alpha: 1, Targets: []string{"q_proj"}}, "rank: -1"},
		{LoRAConfig{Rank: 4, Alpha: 0, Targets: []string{"q_proj"}}, "alpha: 0"},
		{LoRAConfig{Rank: 4, Alpha: 8, Dropout: 0.05, Targets: []string{"q_proj"}}, "dropout: 0.05 is not supported, want 0"},
		{LoRAConfig{Rank: 4, Alpha: 8}, "targets: empty"},
		{LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "lm_head"}}, `targets[1]: "lm_head" is not a module LoRA can adapt`},
		{LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"v_proj", "v_proj"}}, `targets[1]: "v_proj" is listed twice`},
	} {
		require.ErrorContains(t, tc.cfg.Validate(), tc.want)
	}
}

// randomizeB sets every lora_B of m to normal(0, std) values (fresh adapters have
// B = 0, which would make the update and A's gradient vanish).
func randomizeB(t testing.TB, m *Model, seed uint64, std float64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	for _, v := range trainables(m) {
		if v.Name() != "lora_B" {
			continue
		}
		vals := make([]float32, v.Shape().Size())
		for i := range vals {
			vals[i] = float32(std * rng.NormFloat64())
		}
		require.NoError(t, v.SetValue(tensors.FromFlatDataAndDimensions(vals, v.Shape().Dimensions...)))
	}
}

// TestLoRAForwardAndMerge: fresh adapters (B = 0) leave the log-probs bit for bit
// those of the base; with B ≠ 0 the merged weights are W + (α/r)·B·A (float64 on the
// host) and a plain model of the merged weights scores as the adapted one does.
func TestLoRAForwardAndMerge(t *testing.T) {
	backend := newTestBackend(t)
	fields := tinyFields(map[string]any{"tie_word_embeddings": false})
	base := testModel(t, fields, 5)
	m := testModel(t, fields, 5)
	cfg := LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "v_proj", "o_proj", "up_proj", "down_proj"}}
	require.NoError(t, m.AddLoRA(cfg, 1))
	tokens := testTokens(48, 265, 9)
	require.Equal(t, fullLogProbs(t, base, tokens), fullLogProbs(t, m, tokens), "B = 0 is the base model")

	randomizeB(t, m, 2, 0.05)
	merged, err := mergedTensors(backend, m, safetensors.DtypeF32)
	require.NoError(t, err)
	require.Len(t, merged, len(baseVariables(m)))
	byName := map[string]safetensors.NamedTensor{}
	for _, nt := range merged {
		byName[nt.Name] = nt
	}
	for _, mod := range loraModules(m.Config, cfg.Targets) {
		w := tensors.MustCopyFlatData[float32](m.ctx.GetVariableByScopeAndName(mod.Scope, "weight").MustValue())
		a := tensors.MustCopyFlatData[float32](m.ctx.GetVariableByScopeAndName(mod.Scope, "lora_A").MustValue())
		b := tensors.MustCopyFlatData[float32](m.ctx.GetVariableByScopeAndName(mod.Scope, "lora_B").MustValue())
		got := byName[mod.HFModule()+".weight"].Values
		for o := range mod.Out {
			for i := range mod.In {
				var ba float64
				for k := range cfg.Rank {
					ba += float64(b[o*cfg.Rank+k]) * float64(a[k*mod.In+i])
				}
				want := float64(w[o*mod.In+i]) + cfg.Scale()*ba
				require.InDelta(t, want, float64(got[o*mod.In+i]), 1e-6, "%s[%d,%d]", mod.HFModule(), o, i)
			}
		}
	}
	// An untouched tensor is copied as it is.
	require.Equal(t, tensors.MustCopyFlatData[float32](m.ctx.GetVariableByScopeAndName("/model/layers/0/self_attn/k_proj", "weight").MustValue()),
		byName["model.layers.0.self_attn.k_proj.weight"].Values)

	plain, err := Load(testConfig(t, fields), newMemWeights(merged), PrecisionF32)
	require.NoError(t, err)
	got, want := fullLogProbs(t, m, tokens), fullLogProbs(t, plain, tokens)
	require.NotEqual(t, fullLogProbs(t, base, tokens), got, "the adapters change the model")
	for i := range want {
		require.InDelta(t, want[i], got[i], 2e-5, "position %d", i+1)
	}
}

// loraOptions are resumeOptions with rank-4 adapters on every projection.
func loraOptions(ref *Model) TrainerOptions {
	o := resumeOptions(ref)
	o.LoRA = LoRAConfig{Rank: 4, Alpha: 8, Targets: DefaultLoRATargets()}
	return o
}

// TestLoRATrainFreezesBase: a LoRA trainer's steps leave every base weight bit for
// bit as it was and move the adapters; the optimizer holds moments for the adapters
// only; the EMA teacher shares the base; mode base needs LoRA and scores as the base.
func TestLoRATrainFreezesBase(t *testing.T) {
	backend := newTestBackend(t)
	dir := tinyModelDir(t)
	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	base0 := [][]float32{}
	for _, v := range baseVariables(m) {
		base0 = append(base0, f32s(v.MustValue()))
	}
	nBase := m.NumParameters()
	ref, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	tr, err := NewTrainer(backend, m, loraOptions(ref))
	require.NoError(t, err)
	ad := trainables(m)
	require.Len(t, ad, 2*7*m.Config.NumHiddenLayers)
	require.Len(t, tr.opt.m, len(ad), "moments for the adapters only")
	adapterParams := m.NumParameters() - nBase
	require.Equal(t, 4*m.Config.NumHiddenLayers*(2*(64+64)+2*(64+32)+3*(64+128)), adapterParams)
	a0 := weightsOfVars(ad)
	trainSteps(t, tr, rolloutPool(4, 3), 3)
	for i, v := range baseVariables(m) {
		require.Equal(t, base0[i], f32s(v.MustValue()), "%s is frozen", v.ScopeAndName())
	}
	require.NotEqual(t, a0, weightsOfVars(ad), "the adapters train")
	require.Len(t, trainables(tr.teacher.model), len(ad), "the EMA teacher averages the adapters only")

	plain, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	_, err = NewTrainer(backend, plain, TrainerOptions{TeacherModel: TeacherModelConfig{Mode: TeacherBase}})
	require.ErrorContains(t, err, "mode base is the base model with the LoRA adapters off, and there are none")

	opts := loraOptions(nil)
	opts.Credit.KLBeta = 0
	opts.TeacherModel = TeacherModelConfig{Mode: TeacherBase}
	m2, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	tr2, err := NewTrainer(backend, m2, opts)
	require.NoError(t, err)
	randomizeB(t, m2, 4, 0.1)
	tokens := testTokens(40, 265, 8)
	want := fullLogProbs(t, plain, tokens)
	require.NotEqual(t, want, fullLogProbs(t, m2, tokens))
	got, cache, err := tr2.teacher.scorer.Score(t.Context(), tokens)
	require.NoError(t, err)
	cache.Close()
	for i := range want {
		require.InDelta(t, want[i], got[i+1], 1e-5, "the base teacher at position %d", i+1)
	}
	trainSteps(t, tr2, rolloutPool(3, 4), 1)
}

func weightsOfVars(vs []*mlctx.Variable) [][]float32 {
	var out [][]float32
	for _, v := range vs {
		out = append(out, f32s(v.MustValue()))
	}
	return out
}

// loraGrads returns the adapters' gradient of −Σ_t w_t·log p(y_t) by mode.
func loraGrads(t *testing.T, tr *Trainer, tokens []int32, w []float32, mode Backprop) [][]float32 {
	t.Helper()
	acc := tr.grad.zeroGrads()
	terms := chunkTerms{Weight: w}
	var err error
	var cache *KVCache
	if mode != BackpropFull {
		_, cache, err = tr.scorer.Score(t.Context(), tokens)
		require.NoError(t, err)
		defer cache.Close()
	}
	_, err = tr.grad.accumulate(t.Context(), mode, tr.scorer, tokens, cache, terms, 16, 0, acc)
	require.NoError(t, err)
	var out [][]float32
	for _, a := range acc {
		out = append(out, f32s(a))
	}
	return out
}

// TestLoRABackpropModes: with adapters, the exact chunked gradient equals the full
// one and the truncated one differs from it, as for full training.
func TestLoRABackpropModes(t *testing.T) {
	backend := newTestBackend(t)
	m, err := Open(tinyModelDir(t), OpenOptions{})
	require.NoError(t, err)
	opts := loraOptions(nil)
	opts.Credit.KLBeta = 0
	tr, err := NewTrainer(backend, m, opts)
	require.NoError(t, err)
	randomizeB(t, m, 7, 0.1)
	tokens := testTokens(70, 265, 12)
	w := make([]float32, len(tokens))
	for i := range w {
		w[i] = float32(math.Sin(float64(i))) / 16
	}
	full, exact, trunc := loraGrads(t, tr, tokens, w, BackpropFull), loraGrads(t, tr, tokens, w, BackpropExact), loraGrads(t, tr, tokens, w, BackpropTruncated)
	var worstE, worstT, scale float64
	for i := range full {
		for j := range full[i] {
			scale = math.Max(scale, math.Abs(float64(full[i][j])))
			worstE = math.Max(worstE, math.Abs(float64(exact[i][j]-full[i][j])))
			worstT = math.Max(worstT, math.Abs(float64(trunc[i][j]-full[i][j])))
		}
	}
	t.Logf("largest gradient %.3g; exact − full %.3g; truncated − full %.3g", scale, worstE, worstT)
	require.Greater(t, scale, 1e-4)
	require.Less(t, worstE, 1e-4*scale)
	require.Greater(t, worstT, 1e-3*scale)
	require.True(t, slices.ContainsFunc(full, func(g []float32) bool { return slices.ContainsFunc(g, func(x float32) bool { return x != 0 }) }))
}

// TestLoRAFrozenTeacher: a frozen teacher of a LoRA run copies the adapters (not
// the base, which it shares) and refreshes them every refresh_every updates.
func TestLoRAFrozenTeacher(t *testing.T) {
	backend := newTestBackend(t)
	m, err := Open(tinyModelDir(t), OpenOptions{})
	require.NoError(t, err)
	opts := loraOptions(nil)
	opts.Credit.KLBeta = 0
	opts.TeacherModel = TeacherModelConfig{Mode: TeacherFrozen, RefreshEvery: 2}
	tr, err := NewTrainer(backend, m, opts)
	require.NoError(t, err)
	tv := trainables(tr.teacher.model)
	require.Len(t, tv, len(trainables(m)))
	for _, v := range baseVariables(tr.teacher.model) {
		require.Same(t, m.ctx.GetVariableByScopeAndName(v.Scope(), v.Name()).MustValue(), v.MustValue(), "the base is shared")
	}
	a0 := weightsOfVars(tv)
	pool := rolloutPool(4, 8)
	for tr.UpdateCount() < 1 {
		trainSteps(t, tr, pool, 1)
	}
	require.Equal(t, a0, weightsOfVars(tv), "not refreshed after one update")
	require.NotEqual(t, a0, weightsOfVars(trainables(m)))
	for tr.UpdateCount() < 2 {
		trainSteps(t, tr, pool, 1)
	}
	require.Equal(t, weightsOfVars(trainables(m)), weightsOfVars(trainables(tr.teacher.model)), "refreshed after two")
}
