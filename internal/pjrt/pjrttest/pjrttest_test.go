package pjrttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
)

// TestFindCPU: the plugin a test uses comes from $HINDSIGHT_XLA_CPU_PLUGIN or, only
// when that is unset, from the cache, and FindCPU says which (issue 39 item 6).
func TestFindCPU(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(pjrt.CacheEnv, cache)
	t.Setenv(CPUPluginEnv, "")
	_, _, err := FindCPU()
	require.ErrorContains(t, err, "not available from the plugin cache")

	cached := pjrt.CPU.Path(cache)
	require.NoError(t, os.MkdirAll(filepath.Dir(cached), 0o755))
	require.NoError(t, os.WriteFile(cached, nil, 0o644))
	path, from, err := FindCPU()
	require.NoError(t, err)
	require.Equal(t, cached, path)
	require.Contains(t, from, "the plugin cache")

	own := filepath.Join(t.TempDir(), "plugin.so")
	require.NoError(t, os.WriteFile(own, nil, 0o644))
	t.Setenv(CPUPluginEnv, own)
	path, from, err = FindCPU()
	require.NoError(t, err)
	require.Equal(t, own, path)
	require.Equal(t, "$"+CPUPluginEnv, from)
}
