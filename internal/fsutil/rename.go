package fsutil

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// renameat2 is the system call seam of RenameNoReplace. Tests replace it to refuse
// RENAME_NOREPLACE as NFS, CephFS and many FUSE file systems do; a binary built with
// the fsfault tag can refuse it from the environment (fault.go).
var renameat2 = unix.Renameat2

// FaultEnv names the variable that only a binary built with the fsfault tag (the
// crash tests build one; releases never do) reads at start: EINVAL, EPERM, ENOSYS or
// EOPNOTSUPP makes every renameat2 with flags fail with that errno, as on a file
// system without RENAME_NOREPLACE, so the fallback runs on any disk.
const FaultEnv = "HINDSIGHT_FSFAULT_RENAMEAT2"

// fallbackMu serialises the check and the rename of the fallback, so that two
// goroutines of this process cannot both find a name free and both rename onto it.
var fallbackMu sync.Mutex

// Refused reports whether err is how a file system says it does not implement a
// renameat2 flag: EINVAL (NFS, CephFS, FUSE file systems such as bindfs), ENOSYS
// (no renameat2 at all), EOPNOTSUPP, or EPERM (some FUSE file systems, and
// seccomp profiles that deny the call).
func Refused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) ||
		errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPERM)
}

// RenameNoReplace renames oldpath (a file or a directory) to newpath, failing with
// an error wrapping os.ErrExist instead of replacing an existing newpath, then
// fsyncs both directories.
//
// It uses renameat2(RENAME_NOREPLACE). Where the file system refuses the flag
// (Refused) it checks that newpath is free and then renames: that is atomic only
// against this process (the check and the rename are serialised here), so it is
// correct where this process is the only writer of newpath's directory — hindsightd
// holds the data directory's lock, and collectors write only into incoming/. It
// does not fall back to link+unlink: directories cannot be hard-linked, several
// file systems have no hard links, and a crash between the link and the unlink
// leaves the file under both names (an incoming file claimed twice).
func RenameNoReplace(oldpath, newpath string) error {
	err := renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if err != nil && Refused(err) {
		err = checkThenRename(oldpath, newpath)
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) || errors.Is(err, os.ErrExist) {
			return fmt.Errorf("rename %s to %s: %w", oldpath, newpath, os.ErrExist)
		}
		var le *os.LinkError
		if errors.As(err, &le) {
			return le
		}
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	if err := SyncDir(filepath.Dir(newpath)); err != nil {
		return err
	}
	if filepath.Dir(oldpath) != filepath.Dir(newpath) {
		return SyncDir(filepath.Dir(oldpath))
	}
	return nil
}

// checkThenRename is RenameNoReplace's fallback: newpath must not exist (not even as
// a dangling symlink), oldpath must, and then a plain rename(2) moves it.
func checkThenRename(oldpath, newpath string) error {
	fallbackMu.Lock()
	defer fallbackMu.Unlock()
	if _, err := os.Lstat(newpath); err == nil {
		return unix.EEXIST
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if _, err := os.Lstat(oldpath); err != nil {
		return err
	}
	return unix.Rename(oldpath, newpath)
}
