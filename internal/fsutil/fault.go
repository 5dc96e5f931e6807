//go:build fsfault

package fsutil

import (
	"os"

	"golang.org/x/sys/unix"
)

// FaultEnv names the variable that a binary built with the fsfault tag (the crash
// tests build one; releases never do) reads at start: EINVAL, EPERM, ENOSYS or
// EOPNOTSUPP makes every renameat2 with flags fail with that errno, as on a file
// system without RENAME_NOREPLACE, so the fallback runs on any disk.
const FaultEnv = "HINDSIGHT_FSFAULT_RENAMEAT2"

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
