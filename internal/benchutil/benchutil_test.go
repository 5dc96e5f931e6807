package benchutil

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/testwait"
)

func TestTokens(t *testing.T) {
	a := Tokens(1000, 17, 3, 2)
	require.Equal(t, a, Tokens(1000, 17, 3, 2), "deterministic")
	require.NotEqual(t, a, Tokens(1000, 17, 4, 2))
	seen := map[int32]bool{}
	for _, id := range a {
		require.True(t, id >= 0 && id < 17, "id %d", id)
		seen[id] = true
	}
	require.Len(t, seen, 17)
}

var sink [][]byte

func TestHeapSamplerSeesAnAllocation(t *testing.T) {
	runtime.GC()
	h := StartHeapSampler(time.Millisecond)
	sink = append(sink, make([]byte, 64<<20))
	testwait.Until(t, time.Minute, time.Millisecond, func() string { return "a sample after the allocation" },
		func() bool { return h.peakAlloc.Load() >= h.Base.HeapAlloc+60<<20 })
	sink = nil
	alloc, inuse := h.Stop()
	require.GreaterOrEqual(t, alloc, h.Base.HeapAlloc+60<<20)
	require.GreaterOrEqual(t, inuse, h.Base.HeapInuse+60<<20)
}

func TestCallerDir(t *testing.T) {
	dir := CallerDir("x")
	require.Equal(t, "benchutil", filepath.Base(dir))
}

func TestWriteJSON(t *testing.T) {
	path := filepath.Join(t.TempDir(), "results.json")
	require.NoError(t, WriteJSON(path, map[string]any{"ratio": 1.5, "rows": []int{1, 8}}))
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "{\n \"ratio\": 1.5,\n \"rows\": [\n  1,\n  8\n ]\n}\n", string(raw))
	require.NoError(t, WriteJSON("", 1), "no path: nothing written")
	require.ErrorContains(t, WriteJSON(filepath.Join(t.TempDir(), "missing", "r.json"), 1), "missing")
}
