// Package fsutil holds the project's durable-write primitives: every durable write is
// temp file → fsync → rename → fsync the directory, and claims never overwrite.
package fsutil

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
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

// WriteFile writes path durably: fill writes the content into a hidden temp file
// beside it, which is fsynced and renamed over path, and the directory is fsynced. A
// crash leaves the old file or the new one, never a torn one.
func WriteFile(path string, perm os.FileMode, fill func(io.Writer) error) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fill(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return Commit(f, path)
}

// WriteFileBytes is WriteFile for content already in memory.
func WriteFileBytes(path string, data []byte, perm os.FileMode) error {
	return WriteFile(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// Commit makes the temp file f durable under the name path: fsync, close, rename,
// fsync the directory. f is closed in every case; on error the temp file is removed.
func Commit(f *os.File, path string) error {
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
