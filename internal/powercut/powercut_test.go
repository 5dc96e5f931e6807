package powercut

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/fusetest"
)

// mount mounts f at a temp dir for the rest of the test.
func mount(t *testing.T, f *FS) string {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fusetest.Unavailable(t, "no /dev/fuse: "+err.Error())
	}
	dir := t.TempDir()
	if err := f.Mount(dir); err != nil {
		fusetest.Unavailable(t, err.Error())
	}
	t.Cleanup(func() { require.NoError(t, f.Unmount()) })
	return dir
}

// cut cuts the power and mounts the durable state again.
func cut(t *testing.T, f *FS, dir string) {
	t.Helper()
	f.Freeze()
	f.Cut()
	require.NoError(t, f.Unmount())
	require.NoError(t, f.Mount(dir))
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func TestCutKeepsOnlyWhatWasSynced(t *testing.T) {
	f := New(Options{})
	dir := mount(t, f)
	p := func(n string) string { return filepath.Join(dir, n) }

	// Made durable the whole way: temp, fsync, rename, fsync the directory.
	require.NoError(t, fsutil.WriteFileBytes(p("durable"), []byte("kept"), 0o644))
	// Written and fsynced, but its directory entry never synced.
	require.NoError(t, os.Mkdir(p("d"), 0o755))
	fd, err := os.Create(p("d/unlinked"))
	require.NoError(t, err)
	_, err = fd.WriteString("lost")
	require.NoError(t, err)
	require.NoError(t, fd.Sync())
	require.NoError(t, fd.Close())
	// Linked durably (directory synced) but its data never synced: empty after a cut.
	require.NoError(t, os.WriteFile(p("empty"), []byte("unsynced"), 0o644))
	require.NoError(t, fsutil.SyncDir(dir))
	// A durable file overwritten in place, without fsync: the old bytes come back.
	require.NoError(t, os.WriteFile(p("durable"), []byte("changed"), 0o644))
	// A rename never synced is undone.
	require.NoError(t, fsutil.WriteFileBytes(p("moved"), []byte("m"), 0o644))
	require.NoError(t, os.Rename(p("moved"), p("moved2")))
	require.Equal(t, "changed", read(t, p("durable")))

	cut(t, f, dir)
	require.Equal(t, "kept", read(t, p("durable")))
	require.Equal(t, "", read(t, p("empty")))
	require.DirExists(t, p("d"))
	require.NoFileExists(t, p("d/unlinked"))
	require.Equal(t, "m", read(t, p("moved")))
	require.NoFileExists(t, p("moved2"))
	require.Positive(t, f.Counts()["fsyncdir"])
}

func TestRenameFlagsAndLinks(t *testing.T) {
	f := New(Options{})
	dir := mount(t, f)
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.WriteFile(a, nil, 0o644))
	require.ErrorIs(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE), syscall.EINVAL)
	require.ErrorIs(t, os.Link(a, b), syscall.EPERM)
	probe, err := fsutil.Probe(dir)
	require.NoError(t, err)
	require.False(t, probe.RenameNoReplace)
	require.False(t, probe.HardLinks)
	require.True(t, probe.Symlinks)
	require.Equal(t, "fuse", probe.FSType)

	g := New(Options{RenameNoReplace: true})
	dir2 := mount(t, g)
	a, b = filepath.Join(dir2, "a"), filepath.Join(dir2, "b")
	require.NoError(t, os.WriteFile(a, nil, 0o644))
	require.NoError(t, os.WriteFile(b, nil, 0o644))
	require.ErrorIs(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_NOREPLACE), syscall.EEXIST)
	require.NoError(t, unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b+"2", unix.RENAME_NOREPLACE))
}

// TestCutAt freezes at a chosen operation: it and everything after fail with EIO,
// and the cut loses what was not durable before it.
func TestCutAt(t *testing.T) {
	f := New(Options{})
	dir := mount(t, f)
	fired := f.CutAt(func(op Op) bool { return op.Kind == "rename" && strings.HasSuffix(op.Path, "-> final") })
	errc := make(chan error, 1)
	go func() { errc <- fsutil.WriteFileBytes(filepath.Join(dir, "final"), []byte("x"), 0o644) }()
	op := <-fired
	require.Equal(t, "rename", op.Kind)
	f.Cut()
	require.ErrorIs(t, <-errc, syscall.EIO)
	require.NoError(t, f.Unmount())
	require.NoError(t, f.Mount(dir))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, ents, "the temp file was never linked durably")
}

// TestNewDirectoriesNeedTheirParentSynced: a file fsynced and renamed into a new
// directory is lost at a cut unless the directory's own entry was synced too, which
// fsutil.MkdirAll and fsutil.OpenFile do and os.MkdirAll does not.
func TestNewDirectoriesNeedTheirParentSynced(t *testing.T) {
	f := New(Options{})
	dir := mount(t, f)
	p := func(n string) string { return filepath.Join(dir, n) }
	require.NoError(t, os.MkdirAll(p("plain/sub"), 0o755))
	require.NoError(t, fsutil.WriteFileBytes(p("plain/sub/f"), []byte("x"), 0o644))
	require.NoError(t, fsutil.MkdirAll(p("durable/sub"), 0o755))
	require.NoError(t, fsutil.WriteFileBytes(p("durable/sub/f"), []byte("x"), 0o644))
	j, err := fsutil.OpenFile(p("journal"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = j.WriteString("line\n")
	require.NoError(t, err)
	require.NoError(t, j.Sync())
	require.NoError(t, j.Close())

	cut(t, f, dir)
	require.NoDirExists(t, p("plain/sub"), "plain/ is durable (the root was synced since) but empty")
	require.Equal(t, "x", read(t, p("durable/sub/f")))
	require.Equal(t, "line\n", read(t, p("journal")))
}
