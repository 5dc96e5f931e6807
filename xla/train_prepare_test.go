package xla

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

// heapHeld is what the Go runtime holds from the OS for its heap: spans in use
// (live objects and garbage not yet swept) and idle spans not yet returned.
func heapHeld() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapSys - ms.HeapReleased)
}

// TestBF16TrainerReleasesLoadedWeights: a bfloat16 Trainer on XLA CPU leaves no
// host copy of the loaded weights once NewTrainer returns, and gives their memory
// back to the OS there (not at some later collection). Its masters' programs take
// the variables as inputs, which moved them to the device as copies beside the
// host ones; at the qwen3-0.6b shape 1.1 GiB more then stayed resident through
// Trainer.Prepare and the first step, which peaked at 11.09 GiB against a warm
// step's 9.86 (docs/performance.md "Training-step memory"). Decided by each weight's
// storage after NewTrainer (on the device only), and by the Go heap the runtime
// still held then beyond what a collection and debug.FreeOSMemory return, against
// the weights' bytes.
func TestBF16TrainerReleasesLoadedWeights(t *testing.T) {
	backend := xlaCPU(t)
	// A vocabulary large enough that the weights (~21 MB in bfloat16) stand far
	// above what making the trainer's programs leaves behind.
	m := testModelAs(t, tinyFields(map[string]any{"vocab_size": 65536, "hidden_size": 160, "intermediate_size": 320}), 3, PrecisionBF16)
	weights := int64(0)
	for v := range m.ctx.IterVariables() {
		weights += int64(v.Shape().Memory())
	}
	require.Greater(t, weights, int64(16<<20))
	runtime.GC()
	debug.FreeOSMemory()
	tr, err := NewTrainer(backend, m, TrainerOptions{Budget: 64, Chunk: 16, Scorer: ScorerOptions{Chunk: 32}})
	require.NoError(t, err)
	held := heapHeld()
	debug.FreeOSMemory()
	garbage := held - heapHeld()
	t.Logf("bf16 weights %.1f MB; Go heap given back after NewTrainer by a collection: %.1f MB", float64(weights)/1e6, float64(garbage)/1e6)
	require.Less(t, garbage, weights/4, "the loaded weights' host copies were left to a later collection")
	for v := range tr.model.ctx.IterVariables() {
		x := v.MustValue()
		require.True(t, x.IsOnDevice(0) && !x.HasLocal(), "%s on the device only after NewTrainer", v.ScopeAndName())
	}
}
