package efficacy

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

// testBackendSpec is the backend the package's tests run on: pure Go, or
// $HINDSIGHT_TEST_BACKEND (e.g. xla-cpu).
func testBackendSpec() string {
	if s := os.Getenv("HINDSIGHT_TEST_BACKEND"); s != "" {
		return s
	}
	return xla.DefaultBackend
}

// tinyModel opens the test backend and writes an untrained tiny byte-tokenizer model
// (seed 1, float32) into a temporary directory under the name name: the backend, the
// temporary directory and the model's directory.
func tinyModel(t *testing.T, name string) (backends.Backend, string, string) {
	t.Helper()
	backend, err := xla.NewBackend(xla.ResolveBackend(testBackendSpec(), ""))
	require.NoError(t, err)
	dir := t.TempDir()
	model := filepath.Join(dir, name)
	_, err = data.InitModel(model, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: "float32"})
	require.NoError(t, err)
	return backend, dir, model
}
