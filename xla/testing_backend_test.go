package xla

import (
	"os"
	"sync"
	"testing"

	"github.com/gomlx/gomlx/backends"
)

// testBackend is the backend the package's tests share: the pure-Go backend
// (parallelism=-1: the default parallel mode of v0.26.0 deadlocks now and then
// under nested matmuls), or $HINDSIGHT_TEST_BACKEND (e.g. xla-cpu) to run the same
// tests on XLA, whose KV cache takes the DynamicUpdateSlice path.
var testBackend = sync.OnceValues(func() (backends.Backend, error) {
	spec := DefaultBackend
	if s := os.Getenv("HINDSIGHT_TEST_BACKEND"); s != "" {
		spec = s
	}
	return NewBackend(ResolveBackend(spec, ""))
})

func newTestBackend(t testing.TB) backends.Backend {
	t.Helper()
	b, err := testBackend()
	if err != nil {
		t.Fatalf("backend: %v", err)
	}
	return b
}
