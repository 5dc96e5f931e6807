package xla

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
)

// testConfig parses a config.json given as a Go map (defaults filled by data).
func testConfig(t testing.TB, fields map[string]any) *data.ModelConfig {
	t.Helper()
	raw, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := data.ParseModelConfig(raw)
	if err != nil {
		t.Fatalf("config %s: %v", raw, err)
	}
	return mc
}

// tinyFields is a small llama config; callers override keys.
func tinyFields(over map[string]any) map[string]any {
	f := map[string]any{
		"model_type": "llama", "vocab_size": 265, "hidden_size": 64, "intermediate_size": 128,
		"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
		"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 4096,
		"tie_word_embeddings": true, "torch_dtype": "float32",
	}
	for k, v := range over {
		f[k] = v
	}
	return f
}

// testWeights draws every tensor of mc from a stream seeded by seed and the
// tensor's name, scaled so the model is far from uniform (a parity test of a model
// whose outputs are all ≈ −log vocab proves little): projections normal(0, 1/√in),
// embedding and head normal(0, 0.5), norm weights 1 + normal(0, 0.2), biases
// normal(0, 0.2).
func testWeights(mc *data.ModelConfig, seed uint64) []safetensors.NamedTensor {
	dtype := safetensors.DtypeF32
	if mc.TorchDtype == "bfloat16" {
		dtype = safetensors.DtypeBF16
	}
	var out []safetensors.NamedTensor
	for _, s := range mc.Tensors() {
		n := 1
		for _, d := range s.Shape {
			n *= d
		}
		vals := make([]float32, n)
		h := fnv.New64a()
		h.Write([]byte(s.Name))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		normal := func() float64 {
			u1 := (float64(rng.Uint64()>>11) + 1) / (1 << 53)
			u2 := float64(rng.Uint64()>>11) / (1 << 53)
			return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
		}
		var mean, std float64
		switch {
		case strings.HasSuffix(s.Name, "norm.weight"):
			mean, std = 1, 0.2
		case strings.HasSuffix(s.Name, ".bias"):
			std = 0.2
		case strings.Contains(s.Name, "embed_tokens") || strings.HasPrefix(s.Name, "lm_head"):
			std = 0.5
		default:
			std = 1 / math.Sqrt(float64(s.Shape[len(s.Shape)-1]))
		}
		for i := range vals {
			vals[i] = float32(mean + std*normal())
			if dtype == safetensors.DtypeBF16 { // what the file will hold
				vals[i] = safetensors.BF16ToFloat32(safetensors.Float32ToBF16(vals[i]))
			}
		}
		out = append(out, safetensors.NamedTensor{Name: s.Name, Dtype: dtype, Shape: s.Shape, Values: vals})
	}
	return out
}

// memWeights serves NamedTensors (F32 values) as Weights.
type memWeights map[string]safetensors.NamedTensor

func (m memWeights) Names() []string {
	var names []string
	for n := range m {
		names = append(names, n)
	}
	return names
}

func (m memWeights) Tensor(name string) (safetensors.TensorView, error) {
	t, ok := m[name]
	if !ok {
		return safetensors.TensorView{}, fmt.Errorf("tensor %s: not found", name)
	}
	b := make([]byte, 4*len(t.Values))
	for i, v := range t.Values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return safetensors.TensorView{Name: name, Dtype: safetensors.DtypeF32, Shape: t.Shape, Data: b}, nil
}

func newMemWeights(ts []safetensors.NamedTensor) memWeights {
	m := memWeights{}
	for _, t := range ts {
		m[t.Name] = t
	}
	return m
}

// testModel builds a model of the config fields with seeded weights.
func testModel(t testing.TB, fields map[string]any, seed uint64) *Model {
	t.Helper()
	mc := testConfig(t, fields)
	m, err := Load(mc, newMemWeights(testWeights(mc, seed)), PrecisionF32)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// testTokens is a deterministic token sequence.
func testTokens(n, vocab int, seed uint64) []int32 { return benchutil.Tokens(n, vocab, seed, 7) }

// tinyModelDir writes the tiny float32 model directory (byte tokenizer) and
// returns it.
func tinyModelDir(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "model")
	_, err := dataInitModel(dir, "float32")
	require.NoError(t, err)
	return dir
}

func dataInitModel(dir, dtype string) (*data.ModelConfig, error) {
	return data.InitModel(dir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: dtype})
}
