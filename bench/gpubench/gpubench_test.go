package gpubench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestForwardFLOPs checks the count against the hand sum for qwen3-0.6b: 2 FLOPs
// per non-embedding matmul weight per token, the head's 2·d·vocab, and causal
// attention's 2·2·heads·head_dim·T²/2 per layer.
func TestForwardFLOPs(t *testing.T) {
	c, err := data.PresetConfig("qwen3-0.6b", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	matmul := int64(28 * (1024*2048 + 2*1024*1024 + 2048*1024 + 3*1024*3072))
	require.Equal(t, float64(2*matmul+2*1024*151936), ForwardFLOPs(c, 1)-2*2*16*128*0.5*28)
	T := 4096.0
	require.InDelta(t, T*float64(2*matmul+2*1024*151936)+2*2*16*128*T*T/2*28, ForwardFLOPs(c, 4096), 1)
	require.Equal(t, 4*ForwardFLOPs(c, 10), TrainFLOPs(c, 10))
}

// TestEstimateMemory checks the memory model's terms for qwen3-0.6b at 32k tokens.
func TestEstimateMemory(t *testing.T) {
	c, err := data.PresetConfig("qwen3-0.6b", tokenizer.BytesVocabSize)
	require.NoError(t, err)
	e := EstimateMemory(c, 32768, 256, false, false)
	P := c.NumParameters()
	require.Equal(t, 4*P, e.Weights)
	require.Equal(t, 4*P, e.Grads)
	require.Equal(t, 8*P, e.Optimizer)
	require.Equal(t, int64(2*28*8*128*32768*4), e.KVCache, "K and V, every layer, capacity 32768")
	require.Zero(t, e.Cotangent)
	require.Equal(t, 32, e.Chunk, "256 halves until chunk·16 heads·32768 ≤ 2^24")
	exact := EstimateMemory(c, 32768, 256, false, true)
	require.Equal(t, e.KVCache, exact.Cotangent)
	lora := EstimateMemory(c, 32768, 256, true, false)
	require.Less(t, lora.Grads, e.Grads/50, "adapters are a few percent of the weights")
	require.Less(t, lora.Total(), e.Total())
	rows, err := FitTable([]string{"qwen3-0.6b"}, []int{8192})
	require.NoError(t, err)
	require.Equal(t, "full AdamW", rows[0].Verdict)
}

// testDefaults is the rehearsal's options with every stage budget a hang guard
// (testwait): the tests check what each stage records, never how fast a shared
// machine ran it. A test that checks the timeout path sets a budget of its own.
func testDefaults() Options {
	opts := Defaults(true)
	for s := range opts.Budgets {
		opts.Budgets[s] = testwait.Guard(15 * time.Minute)
	}
	return opts
}

// TestRunRehearsal runs the parity, generate and memory stages at tiny sizes on
// the pure-Go backend without a PyTorch peer: results.json records every stage, the
// peer's measurements as skipped, hinted scoring within tolerance, and a stage over
// its budget as a timeout while the next stage still runs.
func TestRunRehearsal(t *testing.T) {
	out := t.TempDir()
	opts := testDefaults()
	// Not plain "go": its parallel mode deadlocks now and then under nested matmuls in
	// GoMLX v0.26.0 (xla.DefaultBackend); one run of this test hung to its timeout.
	opts.Out, opts.Backend = out, xla.DefaultBackend
	opts.Stages = []string{"parity", "long", "generate", "dataparallel", "memory"}
	opts.ParityT, opts.LongT, opts.LongChunk, opts.GenNew, opts.GenBatch = 32, 64, []int{32}, 4, []int{1}
	opts.Budgets["long"] = time.Nanosecond
	res, err := Run(context.Background(), opts, nil, zerolog.Nop())
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(out, "results.json"))
	require.NoError(t, err)
	var got Results
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Len(t, got.Stages, 5)
	require.Equal(t, StatusOK, res.Stage("parity").Status, res.Stage("parity").Error)
	dp := res.Stage("dataparallel")
	require.Equal(t, StatusOK, dp.Status, dp.Error)
	require.Len(t, dp.Data, 1)
	require.Equal(t, "data parallel skipped", dp.Data[0].What, "the pure-Go backend has one device")
	require.Equal(t, StatusTimeout, res.Stage("long").Status)
	require.Equal(t, StatusOK, res.Stage("generate").Status, res.Stage("generate").Error)
	require.Equal(t, StatusOK, res.Stage("memory").Status, res.Stage("memory").Error)
	var hinted, skipped, bf16 bool
	for _, r := range got.Stages[0].Data {
		switch r.What {
		case "hindsight bf16 vs f32":
			bf16 = true
			require.Less(t, r.Fields["mean_abs"], 0.1, r.Fields)
		case "hinted prefix reuse vs spliced":
			hinted = true
			require.Equal(t, true, r.Fields["pass"], r.Fields)
		case "torch log-probs skipped":
			skipped = true
			require.Contains(t, r.Fields["reason"], "no PyTorch peer")
		}
	}
	require.True(t, hinted)
	require.True(t, skipped)
	require.True(t, bf16, "the parity stage compares bf16 with f32")
	require.NotNil(t, got.Finished)
}

// TestRunRehearsalPrecision runs the speed and memory stages at tiny sizes on the
// pure-Go backend in f32 and bf16: each precision records a scoring pass and a
// training step that updated, the bf16 ones as bfloat16, and the memory stage
// records the precision table.
func TestRunRehearsalPrecision(t *testing.T) {
	out := t.TempDir()
	opts := testDefaults()
	// The pure-Go backend without its parallel mode, which deadlocks now and then
	// under nested matmuls in v0.26.0 (xla.DefaultBackend).
	opts.Out, opts.Backend = out, xla.DefaultBackend
	opts.Stages = []string{"speed", "memory"}
	opts.SpeedT, opts.Reps = []int{32}, 1
	res, err := Run(context.Background(), opts, nil, zerolog.Nop())
	require.NoError(t, err)
	require.Equal(t, StatusOK, res.Stage("speed").Status, res.Stage("speed").Error)
	require.Equal(t, StatusOK, res.Stage("memory").Status, res.Stage("memory").Error)
	seen := map[string]int{}
	for _, r := range res.Stage("speed").Data {
		if r.What == "hindsight score" || r.What == "hindsight train step" {
			seen[r.What+" "+r.Fields["dtype"].(string)]++
			if r.What == "hindsight train step" {
				require.Equal(t, true, r.Fields["updated"])
			}
		}
	}
	require.Equal(t, map[string]int{"hindsight score float32": 1, "hindsight score bfloat16": 1,
		"hindsight train step float32": 1, "hindsight train step bfloat16": 1}, seen)
	var table bool
	for _, r := range res.Stage("memory").Data {
		table = table || r.What == "precision table"
	}
	require.True(t, table)
}

// TestRunDataParallelStage runs the data-parallel stage on two XLA CPU devices at a
// tiny size: a step on one device and on both, each updating, and the speed-up
// recorded (not checked: two virtual devices share the machine's cores).
func TestRunDataParallelStage(t *testing.T) {
	path, err := xla.CPUPluginPath()
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		if os.Getenv("HINDSIGHT_REQUIRE_XLA_CPU") != "" {
			t.Fatalf("XLA CPU plugin: %v", err)
		}
		t.Skipf("XLA CPU plugin not available: %v", err)
	}
	opts := testDefaults()
	opts.Out, opts.Backend = t.TempDir(), xla.CPUPluginName+",devices=2"
	opts.Stages, opts.DataParallelT = []string{"dataparallel"}, 32
	res, err := Run(context.Background(), opts, nil, zerolog.Nop())
	require.NoError(t, err)
	st := res.Stage("dataparallel")
	require.Equal(t, StatusOK, st.Status, st.Error)
	devices := map[any]bool{}
	var scaling bool
	for _, r := range st.Data {
		switch r.What {
		case "hindsight data-parallel step":
			devices[r.Fields["devices"]] = true
			require.Positive(t, r.Fields["tokens_per_s"])
		case "data parallel scaling":
			scaling = true
			require.Positive(t, r.Fields["speedup"])
		}
	}
	require.Len(t, devices, 2, "a step on 1 device and on 2")
	require.True(t, scaling)
}
