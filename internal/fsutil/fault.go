//go:build fsfault

package fsutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// init arms FaultEnv (rename.go) in binaries built with the fsfault tag.
func init() {
	errno, ok := map[string]unix.Errno{
		"EINVAL": unix.EINVAL, "EPERM": unix.EPERM, "ENOSYS": unix.ENOSYS, "EOPNOTSUPP": unix.EOPNOTSUPP,
	}[os.Getenv(FaultEnv)]
	if !ok {
		return
	}
	real := renameat2
	renameat2 = func(olddirfd int, oldpath string, newdirfd int, newpath string, flags uint) error {
		if flags != 0 {
			return errno
		}
		return real(olddirfd, oldpath, newdirfd, newpath, flags)
	}
}
