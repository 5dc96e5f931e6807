package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
)

// The compiled-program cache's run name follows what decides the programs: the same
// settings name the same run in a restarted process, another model config, chunk or
// precision another run.
func TestProgramRunNamesTheShape(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"hidden_size": 64}`), 0o644))
	o := Options{Backend: "xla:cpu", ModelDir: dir, Config: DefaultConfig(), Credit: credit.DefaultConfig()}
	for _, v := range []any{o.Config, o.Credit} {
		_, err := json.Marshal(v) // no fallback to %+v, which could print pointers
		require.NoError(t, err)
	}
	name := programRun(o)
	require.Equal(t, name, programRun(o), "stable across calls (and processes)")
	other := o
	other.Config.Chunk++
	require.NotEqual(t, name, programRun(other))
	other = o
	other.Precision = "bf16"
	require.NotEqual(t, name, programRun(other))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"hidden_size": 128}`), 0o644))
	require.NotEqual(t, name, programRun(o))
}
