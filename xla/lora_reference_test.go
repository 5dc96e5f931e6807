package xla

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

var updateLoRA = flag.Bool("update-lora", false, "regenerate testdata/lora/grad_reference.json with testdata/gen_lora_reference.py (needs /usr/bin/python3 with torch)")

// loraRefFixture is testdata/lora/grad_reference.json: the inputs (the model and
// adapters are regenerated from seeds, checked by their sums) and PyTorch's
// gradient and post-AdamW adapters under PEFT names.
type loraRefFixture struct {
	Config      map[string]any       `json:"config"`
	Seed        uint64               `json:"seed"`
	LoRA        LoRAConfig           `json:"lora"`
	AdapterSeed uint64               `json:"adapter_seed"`
	AdapterSum  float64              `json:"adapter_sum"`
	Tokens      []int32              `json:"tokens"`
	Weights     []float32            `json:"weights"`
	AdamW       AdamWConfig          `json:"adamw"`
	Torch       string               `json:"torch"`
	Loss        float64              `json:"loss"`
	GradNorm    float64              `json:"grad_norm"`
	Grads       map[string][]float64 `json:"grads"`
	Stepped     map[string][]float64 `json:"stepped"`
}

// loraRefCase is the reference's setup: a tiny qwen3 (q/k norms, GQA, untied head)
// with rank-4 adapters on four of the seven projections, B drawn non-zero so A's
// gradient is not zero.
func loraRefCase() loraRefFixture {
	f := loraRefFixture{
		Config: tinyFields(map[string]any{"model_type": "qwen3", "hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
			"head_dim": 16, "intermediate_size": 96, "tie_word_embeddings": false}),
		Seed: 42, AdapterSeed: 5,
		LoRA:   LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"q_proj", "v_proj", "o_proj", "down_proj"}},
		Tokens: testTokens(64, 265, 17),
		AdamW:  AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1},
	}
	f.Weights = make([]float32, len(f.Tokens))
	for t := 1; t < len(f.Tokens); t++ {
		f.Weights[t] = float32(math.Sin(0.7*float64(t))) / 32
	}
	return f
}

// loraRefModel builds the fixture's model with its adapters and returns the sum of
// the adapters' values.
func loraRefModel(t *testing.T, f loraRefFixture) (*Model, float64) {
	t.Helper()
	m := testModel(t, f.Config, f.Seed)
	require.NoError(t, m.AddLoRA(f.LoRA, f.AdapterSeed))
	randomizeB(t, m, f.AdapterSeed, 0.2)
	var sum float64
	for _, v := range trainables(m) {
		for _, x := range f32s(v.MustValue()) {
			sum += float64(x)
		}
	}
	return m, sum
}

// TestLoRAGradientVsPyTorch: the adapters' gradient of −Σ w_t·log p(y_t) (full and
// exact chunked backprop) and the adapters after one AdamW step (clip, decoupled
// decay) match a hand-written float64 PyTorch LoRA (testdata/gen_lora_reference.py).
func TestLoRAGradientVsPyTorch(t *testing.T) {
	path := filepath.Join("testdata", "lora", "grad_reference.json")
	if *updateLoRA {
		writeLoRAReference(t, path)
	}
	raw, err := os.ReadFile(path)
	require.NoError(t, err, "run: go test ./xla -run TestLoRAGradientVsPyTorch -update-lora")
	var fx loraRefFixture
	require.NoError(t, json.Unmarshal(raw, &fx))
	m, sum := loraRefModel(t, fx)
	require.InDelta(t, fx.AdapterSum, sum, 1e-9*math.Max(1, math.Abs(sum)), "adapter generator drifted from the fixture")

	backend := newTestBackend(t)
	opts := TrainerOptions{Credit: resumeOptions(nil).Credit, LoRA: fx.LoRA, Optimizer: fx.AdamW, Seed: 1}
	opts.Credit.KLBeta = 0
	tr, err := NewTrainer(backend, m, opts)
	require.NoError(t, err)
	names := make([]string, len(tr.grad.params))
	for i, v := range tr.grad.params {
		names[i] = peftName(v.Scope(), v.Name())
	}
	scale := 0.0
	for _, g := range fx.Grads {
		for _, x := range g {
			scale = math.Max(scale, math.Abs(x))
		}
	}
	require.Greater(t, scale, 1e-3)
	var grads [][]float32
	for _, mode := range []Backprop{BackpropFull, BackpropExact} {
		grads = loraGrads(t, tr, fx.Tokens, fx.Weights, mode)
		worst := 0.0
		for i, n := range names {
			want := fx.Grads[n]
			require.Len(t, want, len(grads[i]), n)
			for j := range want {
				worst = math.Max(worst, math.Abs(want[j]-float64(grads[i][j])))
			}
		}
		t.Logf("%s: max |Go − PyTorch| gradient %.3g (largest %.3g)", mode, worst, scale)
		require.Less(t, worst, 1e-4*scale, "%s gradient", mode)
	}

	params := make([]*tensors.Tensor, len(names))
	acc := make([]*tensors.Tensor, len(names))
	for i, v := range tr.grad.params {
		params[i] = v.MustValue()
		acc[i] = tensors.FromFlatDataAndDimensions(grads[i], v.Shape().Dimensions...)
	}
	stepped, norm, _, err := tr.opt.apply(params, acc)
	require.NoError(t, err)
	require.InDelta(t, fx.GradNorm, norm, 1e-4*fx.GradNorm)
	worst := 0.0
	for i, n := range names {
		got := f32s(stepped[i])
		for j, want := range fx.Stepped[n] {
			worst = math.Max(worst, math.Abs(want-float64(got[j])))
		}
	}
	t.Logf("AdamW step: max |Go − PyTorch| %.3g (lr %g)", worst, fx.AdamW.LR)
	require.Less(t, worst, 2e-5)
}

// writeLoRAReference writes the model directory, adapters and inputs, runs the
// PyTorch reference and stores the fixture.
func writeLoRAReference(t *testing.T, path string) {
	f := loraRefCase()
	m, sum := loraRefModel(t, f)
	f.AdapterSum = sum
	dir := t.TempDir()
	mc := testConfig(t, f.Config)
	require.NoError(t, data.WriteModelConfig(filepath.Join(dir, "config.json"), mc))
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), testWeights(mc, f.Seed), nil))
	ad, err := adapterTensors(m)
	require.NoError(t, err)
	require.NoError(t, safetensors.Write(filepath.Join(dir, "adapter_model.safetensors"), ad, nil))
	o := f.AdamW
	inputs, _ := json.Marshal(map[string]any{"tokens": f.Tokens, "weights": f.Weights, "rank": f.LoRA.Rank, "alpha": f.LoRA.Alpha,
		"adamw": map[string]any{"lr": o.LR, "beta1": o.Beta1, "beta2": o.Beta2, "eps": o.Eps, "weight_decay": o.WeightDecay, "clip_norm": o.ClipNorm}})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "inputs.json"), inputs, 0o644))
	py, err := filepath.Abs(filepath.Join("testdata", "gen_lora_reference.py"))
	require.NoError(t, err)
	cmd := exec.Command("/usr/bin/python3", py, dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Run())
	raw, err := os.ReadFile(filepath.Join(dir, "lora_reference.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &f))
	out, err := json.MarshalIndent(f, "", " ")
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
}
