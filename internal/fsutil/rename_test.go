package fsutil

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/hindsight-ai/hindsight/internal/fusetest"
)

// refuseFlags makes renameat2 refuse every flag with errno for the rest of the test,
// as NFS (EINVAL) or a seccomp profile (EPERM) does.
func refuseFlags(t *testing.T, errno unix.Errno) {
	real := renameat2
	calls := 0
	renameat2 = func(od int, o string, nd int, n string, flags uint) error {
		if flags != 0 {
			calls++
			return errno
		}
		return real(od, o, nd, n, flags)
	}
	t.Cleanup(func() {
		renameat2 = real
		require.Positive(t, calls, "the refusing renameat2 was never called: the test did not test the fallback")
	})
}

func TestRenameNoReplace(t *testing.T) {
	for _, mode := range []struct {
		name  string
		errno unix.Errno // 0: the real renameat2
	}{{"renameat2", 0}, {"EINVAL", unix.EINVAL}, {"EPERM", unix.EPERM}, {"ENOSYS", unix.ENOSYS}, {"EOPNOTSUPP", unix.EOPNOTSUPP}} {
		t.Run(mode.name, func(t *testing.T) {
			if mode.errno != 0 {
				refuseFlags(t, mode.errno)
			}
			dir := t.TempDir()
			p := func(n string) string { return filepath.Join(dir, n) }
			require.NoError(t, os.WriteFile(p("a"), []byte("a"), 0o644))
			require.NoError(t, os.WriteFile(p("b"), []byte("b"), 0o644))
			require.NoError(t, os.Mkdir(p("d"), 0o755))
			require.NoError(t, os.WriteFile(p("d/x"), []byte("x"), 0o644))
			require.NoError(t, os.Mkdir(p("sub"), 0o755))

			// A file onto an existing file, a directory onto an existing directory
			// (even an empty one, which rename(2) would replace) and onto a dangling
			// symlink: each refused with os.ErrExist, nothing changed.
			require.ErrorIs(t, RenameNoReplace(p("a"), p("b")), os.ErrExist)
			require.NoError(t, os.Mkdir(p("empty"), 0o755))
			require.ErrorIs(t, RenameNoReplace(p("d"), p("empty")), os.ErrExist)
			require.NoError(t, os.Symlink("nowhere", p("dangling")))
			require.ErrorIs(t, RenameNoReplace(p("a"), p("dangling")), os.ErrExist)
			b, err := os.ReadFile(p("b"))
			require.NoError(t, err)
			require.Equal(t, "b", string(b))
			require.FileExists(t, p("a"))
			require.FileExists(t, p("d/x"))

			// A file and a directory to free names, across directories.
			require.NoError(t, RenameNoReplace(p("a"), p("sub/a2")))
			require.NoError(t, RenameNoReplace(p("d"), p("sub/d2")))
			require.NoFileExists(t, p("a"))
			require.NoDirExists(t, p("d"))
			b, err = os.ReadFile(p("sub/d2/x"))
			require.NoError(t, err)
			require.Equal(t, "x", string(b))

			// A missing source is os.ErrNotExist (a claim whose file vanished).
			require.ErrorIs(t, RenameNoReplace(p("gone"), p("sub/gone")), os.ErrNotExist)
		})
	}
}

func TestProbe(t *testing.T) {
	dir := t.TempDir()
	f, err := Probe(dir)
	require.NoError(t, err)
	require.True(t, f.HardLinks, "%s", f)
	require.True(t, f.Symlinks, "%s", f)
	require.NotEmpty(t, f.FSType)
	real := f.RenameNoReplace

	refuseFlags(t, unix.EINVAL)
	f, err = Probe(dir)
	require.NoError(t, err)
	require.False(t, f.RenameNoReplace)
	require.Equal(t, "check-then-rename", f.RenameMode())
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "the probe leaves nothing behind")
	t.Logf("%s (renameat2 flags on the test's own disk: %v)", f, real)
}

// TestRenameNoReplaceBindfs runs RenameNoReplace and Probe on a real FUSE file system
// that refuses RENAME_NOREPLACE and hard-linked directories (bindfs).
func TestRenameNoReplaceBindfs(t *testing.T) {
	dir := fusetest.Bindfs(t)
	f, err := Probe(dir)
	require.NoError(t, err)
	t.Logf("bindfs: %s", f)
	require.False(t, f.RenameNoReplace, "bindfs refuses RENAME_NOREPLACE; if it no longer does, this test needs another file system")
	require.Equal(t, "fuse", f.FSType)

	p := func(n string) string { return filepath.Join(dir, n) }
	require.NoError(t, os.Mkdir(p("d"), 0o755))
	require.NoError(t, os.WriteFile(p("d/x"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(p("e"), 0o755))
	require.ErrorIs(t, RenameNoReplace(p("d"), p("e")), os.ErrExist)
	require.NoError(t, RenameNoReplace(p("d"), p("step")))
	require.FileExists(t, p("step/x"))
	require.NoError(t, os.WriteFile(p("f"), nil, 0o644))
	require.ErrorIs(t, RenameNoReplace(p("f"), p("step/x")), os.ErrExist)
	require.NoError(t, RenameNoReplace(p("f"), p("step/f")))
}
