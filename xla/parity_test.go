package xla

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "regenerate testdata/parity/*.json with testdata/gen_reference.py (needs /usr/bin/python3 with torch)")

// parityCase is a model checked against a PyTorch reference: its fixture's name
// (testdata/parity/NAME.json) and config fields.
type parityCase struct {
	name   string
	fields map[string]any
}

// parityCases are the architectures checked against the PyTorch reference.
var parityCases = []parityCase{
	{"llama_gqa2_tied", tinyFields(nil)},
	{"llama_mha_untied", tinyFields(map[string]any{"num_key_value_heads": 4, "tie_word_embeddings": false, "rope_theta": 500000.0})},
	{"llama_mqa_llama3rope_bias", tinyFields(map[string]any{"num_key_value_heads": 1, "attention_bias": true, "mlp_bias": true,
		"rope_scaling": map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64}})},
	{"qwen2_bias_untied", tinyFields(map[string]any{"model_type": "qwen2", "tie_word_embeddings": false, "rms_norm_eps": 1e-6})},
	{"qwen3_qknorm", tinyFields(map[string]any{"model_type": "qwen3", "hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96})},
	{"mistral_gqa4_bf16", tinyFields(map[string]any{"model_type": "mistral", "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 8, "torch_dtype": "bfloat16", "tie_word_embeddings": false})},
}

// parityFixture is what testdata/parity/NAME.json holds.
type parityFixture struct {
	Config     map[string]any `json:"config"`
	Seed       uint64         `json:"seed"`
	Tokens     []int32        `json:"tokens"`
	LogProbs   []float64      `json:"logprobs"` // log p(tokens[t] | tokens[:t]), t = 1…T-1
	WeightsSum float64        `json:"weights_sum"`
}

const paritySeed, parityLen = 42, 80

// fullLogProbs runs the model over tokens in one chunk without a cache: the plain
// causal forward.
func fullLogProbs(t testing.TB, m *Model, tokens []int32) []float32 {
	t.Helper()
	cfg := m.Config
	e, err := mlctx.NewExec(newTestBackend(t), m.ctx, func(ctx *mlctx.Context, tok, tgt *Node) *Node {
		h := decoder(ctx, cfg, tok, ScalarZero(tok.Graph(), tok.DType()), chunkOnly{})
		return tokenLogProbs(ctx, cfg, h, tgt)
	})
	require.NoError(t, err)
	tgt := append(append([]int32{}, tokens[1:]...), 0)
	out, err := e.Exec(tensors.FromFlatDataAndDimensions(tokens, 1, len(tokens)), tensors.FromFlatDataAndDimensions(tgt, 1, len(tokens)))
	require.NoError(t, err)
	lp := tensors.MustCopyFlatData[float32](out[0])
	return lp[:len(tokens)-1] // lp[i] = log p(tokens[i+1] | tokens[:i+1])
}

func weightsSum(ts []safetensors.NamedTensor) float64 {
	var s float64
	for _, t := range ts {
		for _, v := range t.Values {
			s += float64(v)
		}
	}
	return s
}

func TestParityWithPyTorch(t *testing.T) {
	if *update {
		writeParityFixtures(t, parityCases, "/usr/bin/python3", "gen_reference.py")
	}
	for _, tc := range parityCases {
		t.Run(tc.name, func(t *testing.T) {
			fx, sd := readParityFixture(t, tc.name)
			m, err := Load(testConfig(t, fx.Config), sd, PrecisionF32)
			require.NoError(t, err)

			full := fullLogProbs(t, m, fx.Tokens)
			s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 16})
			require.NoError(t, err)
			chunked, cache, err := s.Score(t.Context(), fx.Tokens)
			require.NoError(t, err)
			defer cache.Close()
			var worst float64
			for i, want := range fx.LogProbs {
				worst = math.Max(worst, math.Abs(float64(full[i])-want))
				require.InDelta(t, want, full[i], 1e-4, "unchunked, position %d", i+1)
				require.InDelta(t, want, chunked[i+1], 1e-4, "chunked, position %d", i+1)
			}
			t.Logf("max |Go − PyTorch| = %.2g over %d positions", worst, len(fx.LogProbs))
		})
	}
}

// readParityFixture reads testdata/parity/NAME.json and opens its model's weights,
// written to a safetensors file (so bf16 goes through the file path).
func readParityFixture(t *testing.T, name string) (parityFixture, *safetensors.Dir) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "parity", name+".json"))
	require.NoError(t, err, "run: go test ./xla -run TestParityWithPyTorch -update")
	var fx parityFixture
	require.NoError(t, json.Unmarshal(raw, &fx))
	mc := testConfig(t, fx.Config)
	ws := testWeights(mc, fx.Seed)
	require.InDelta(t, fx.WeightsSum, weightsSum(ws), 1e-6*math.Max(1, math.Abs(fx.WeightsSum)), "weights generator drifted from the fixture")
	dir := t.TempDir()
	require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), ws, nil))
	sd, err := safetensors.OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { sd.Close() })
	return fx, sd
}

// writeParityFixtures writes each case's model directory, runs the PyTorch
// reference (testdata/script, run by python) on them and stores the fixtures.
func writeParityFixtures(t *testing.T, cases []parityCase, python, script string) {
	py, err := filepath.Abs(filepath.Join("testdata", script))
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join("testdata", "parity"), 0o755))
	root := t.TempDir()
	var dirs []string
	for _, tc := range cases {
		mc := testConfig(t, tc.fields)
		dir := filepath.Join(root, tc.name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, data.WriteModelConfig(filepath.Join(dir, "config.json"), mc))
		require.NoError(t, safetensors.Write(filepath.Join(dir, "model.safetensors"), testWeights(mc, paritySeed), nil))
		tok, _ := json.Marshal(testTokens(parityLen, mc.VocabSize, paritySeed))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "tokens.json"), tok, 0o644))
		dirs = append(dirs, dir)
	}
	cmd := exec.Command(python, append([]string{py}, dirs...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Run())
	for i, tc := range cases {
		var ref struct {
			LogProbs   []float64 `json:"logprobs"`
			WeightsSum float64   `json:"weights_sum"`
		}
		raw, err := os.ReadFile(filepath.Join(dirs[i], "reference.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(raw, &ref))
		fx := parityFixture{Config: tc.fields, Seed: paritySeed, Tokens: testTokens(parityLen, testConfig(t, tc.fields).VocabSize, paritySeed),
			LogProbs: ref.LogProbs, WeightsSum: ref.WeightsSum}
		out, err := json.MarshalIndent(fx, "", " ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("testdata", "parity", tc.name+".json"), append(out, '\n'), 0o644))
	}
}
