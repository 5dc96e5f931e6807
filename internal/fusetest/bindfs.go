// Package fusetest gives tests a directory on a real FUSE file system that lacks
// renameat2(RENAME_NOREPLACE) and hard-linked directories: Debian's bindfs, as the
// data and checkpoint directories on NFS, CephFS and many FUSE mounts of GPU clusters.
package fusetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// RequireEnv names the variable that makes a missing bindfs or /dev/fuse a test
// failure instead of a skip (.ci/run sets it).
const RequireEnv = "HINDSIGHT_REQUIRE_FUSE"

// Unavailable skips t, or fails it when RequireEnv is set.
func Unavailable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s (%s is set, so FUSE tests must run)", why, RequireEnv)
	}
	t.Skip(why)
}

// Bindfs mounts a new empty temp directory through bindfs and returns the mount
// point, unmounted when the test ends.
func Bindfs(t testing.TB) string {
	t.Helper()
	bindfs, err := exec.LookPath("bindfs")
	if err != nil {
		Unavailable(t, "no bindfs on PATH (apt-get install bindfs)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Unavailable(t, "no /dev/fuse: "+err.Error())
	}
	src, mnt := t.TempDir(), t.TempDir()
	if out, err := exec.Command(bindfs, "--no-allow-other", src, mnt).CombinedOutput(); err != nil {
		Unavailable(t, "mount bindfs: "+err.Error()+": "+string(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("fusermount", "-u", mnt).CombinedOutput(); err != nil {
			// A process the test started may still hold a file open; a lazy unmount
			// detaches now and finishes when it closes.
			if out2, err2 := exec.Command("fusermount", "-u", "-z", mnt).CombinedOutput(); err2 != nil {
				t.Errorf("unmount bindfs %s: %v: %s; %v: %s", mnt, err, out, err2, out2)
			}
		}
	})
	return filepath.Clean(mnt)
}
