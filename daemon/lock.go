package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dirLock is an exclusive flock on <data>/LOCK, held for the daemon's life, so two
// daemons never share a spool. The kernel drops it when the process dies, so a crash
// leaves no stale lock; an exit removes the file too, so a data directory without a
// running daemon has no LOCK (a crash leaves the file, unlocked and harmless).
type dirLock struct {
	f    *os.File
	path string
}

// lockDataDir takes the data directory's lock or says who holds it.
func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, "LOCK")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock data dir: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			b, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				holder := strings.TrimSpace(string(b))
				if holder == "" {
					holder = "unknown"
				}
				return nil, fmt.Errorf("lock data dir %s: another hindsightd (pid %s) is using it", dir, holder)
			}
			return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
		}
		// The daemon that held the lock removes the file before it lets go: if the
		// file we locked is no longer the one at path, take the new one.
		held, err1 := f.Stat()
		now, err2 := os.Stat(path)
		if err1 != nil || err2 != nil || !os.SameFile(held, now) {
			f.Close()
			continue
		}
		if err := f.Truncate(0); err == nil {
			f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		}
		return &dirLock{f: f, path: path}, nil
	}
}

// release removes LOCK and drops the lock.
func (l *dirLock) release() error {
	if l == nil || l.f == nil {
		return nil
	}
	rmErr := os.Remove(l.path)
	if errors.Is(rmErr, os.ErrNotExist) {
		rmErr = nil
	}
	err := l.f.Close() // closing the last descriptor drops the flock
	l.f = nil
	return errors.Join(rmErr, err)
}
