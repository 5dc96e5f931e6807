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

// MkdirAll is os.MkdirAll whose new directories are durable: after making each
// missing directory it fsyncs the one holding it, so that a power cut cannot take a
// directory away, with the files later renamed into it, once they are synced.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("make dir %s: not a directory", dir)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil {
		if os.IsExist(err) {
			return nil
		}
		return fmt.Errorf("make dir %s: %w", dir, err)
	}
	return SyncDir(parent)
}

// OpenFile is os.OpenFile whose newly created file is durable: when flag has
// os.O_CREATE and the file did not exist, the directory holding it is fsynced, so a
// power cut cannot take away the file whose contents were fsynced (a journal).
func OpenFile(path string, flag int, perm os.FileMode) (*os.File, error) {
	_, statErr := os.Lstat(path)
	f, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, err
	}
	if flag&os.O_CREATE != 0 && os.IsNotExist(statErr) {
		if err := SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}
