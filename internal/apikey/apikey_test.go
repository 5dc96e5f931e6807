package apikey

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	require.NoError(t, os.WriteFile(good, []byte("# ops\n"+Hash("k1")+"\n\n"+Hash("k2")+"\n"), 0o600))
	k, err := Load(good, "keys_file")
	require.NoError(t, err)
	require.True(t, k.Valid("k1"))
	require.True(t, k.Valid("k2"))
	require.False(t, k.Valid("k3"))
	require.False(t, k.Valid(""))

	plain := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(plain, []byte("k1\n"), 0o600))
	_, err = Load(plain, "keys_file")
	require.ErrorContains(t, err, "line 1: want sha256:")
	require.NotContains(t, err.Error(), "k1\n")
}
