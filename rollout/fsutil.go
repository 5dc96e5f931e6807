package rollout

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SyncDir fsyncs a directory so that a rename or create inside it is durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}

// WriteFileAtomic writes data to path durably: a temp file beside it, fsync, rename,
// fsync the directory. A crash leaves either the old file or the new one, never a
// torn one.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return CommitFile(f, path)
}

// CommitFile makes the temp file f durable under the name path: fsync, close, rename,
// fsync the directory. f is closed in every case; on error the temp file is removed.
func CommitFile(f *os.File, path string) error {
	tmp := f.Name()
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return SyncDir(filepath.Dir(path))
}

// ErrExist is returned by RenameNoReplace when the destination already exists.
var ErrExist = os.ErrExist

// RenameNoReplace renames oldpath to newpath, failing with an error wrapping
// os.ErrExist instead of overwriting an existing newpath, then fsyncs both
// directories. It uses renameat2(RENAME_NOREPLACE) and falls back to link+unlink on
// file systems that lack it.
func RenameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		if err = os.Link(oldpath, newpath); err == nil {
			err = os.Remove(oldpath)
		}
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("rename %s to %s: %w", oldpath, newpath, os.ErrExist)
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
