package main

// Storage tests: the daemon on a file system without renameat2(RENAME_NOREPLACE),
// forced at the system call seam or real (bindfs), and no temp file after a restart.

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/fusetest"
)

var renameModeRe = regexp.MustCompile(`"rename_mode":"([^"]+)"`)

// requireRenameMode checks the daemon's start-up storage line: with fallback the
// no-replace renames must go through check-then-rename, else the test did not test it.
func requireRenameMode(t *testing.T, log string, fallback bool) {
	t.Helper()
	m := renameModeRe.FindStringSubmatch(log)
	require.NotNil(t, m, "no storage line in the log:\n%s", log)
	if fallback {
		require.Equal(t, "check-then-rename", m[1])
	}
}

// tempEntry matches what an interrupted durable write leaves: ".x.tmp-N", ".tmp-…",
// ".latest.tmp", "x.rejected.arrow.tmp", probe scratch, a directory moved aside.
var tempEntry = regexp.MustCompile(`\.tmp(-|$)|^\.fsprobe-|^\..+\.old-[0-9]+$`)

// requireNoTemps fails if any temp entry is left anywhere under dataDir.
func requireNoTemps(t *testing.T, dataDir string) {
	t.Helper()
	var left []string
	require.NoError(t, filepath.WalkDir(dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if tempEntry.MatchString(d.Name()) {
			left = append(left, strings.TrimPrefix(p, dataDir+"/"))
		}
		return nil
	}))
	require.Empty(t, left, "temp entries survived a restart")
}

// demoOn runs hindsightd -demo in dir with env, and with again a second time on the
// same data directory (it adds new rollouts, not duplicates); it returns the first
// run's output.
func demoOn(t *testing.T, dir string, env []string, again bool) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "hindsightd"), "-demo")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "summary: 5 files: 4 done, 0 failed (no surviving row), 1 quarantined")
	data := filepath.Join(dir, "hindsight-data")
	require.Len(t, listDir(t, filepath.Join(data, "spool", "done")), 4)
	require.NotEmpty(t, listDir(t, filepath.Join(data, "checkpoints")))
	if !again {
		requireNoTemps(t, data)
		return string(out)
	}
	cmd = exec.Command(filepath.Join(binDir, "hindsightd"), "-demo", "-data-dir", data)
	cmd.Env = append(os.Environ(), env...)
	out2, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out2))
	require.Contains(t, string(out2), "13 rollouts accepted")
	requireNoTemps(t, data)
	return string(out)
}

// TestDemoBindfs runs the demo with its data directory on bindfs, where the first
// checkpoint used to fail (a directory cannot be hard-linked).
func TestDemoBindfs(t *testing.T) {
	dir := fusetest.Bindfs(t)
	out := demoOn(t, dir, nil, true)
	require.Contains(t, out, "storage: fuse, renames: check-then-rename")
	f, err := fsutil.Probe(dir)
	require.NoError(t, err)
	require.False(t, f.RenameNoReplace, "bindfs refuses RENAME_NOREPLACE: %s", f)
}

// TestDemoFallback runs the demo with RENAME_NOREPLACE refused (EINVAL, as NFS does)
// at the system call seam.
func TestDemoFallback(t *testing.T) {
	out := demoOn(t, t.TempDir(), []string{fsutil.FaultEnv + "=EINVAL"}, false)
	require.Contains(t, out, "renames: check-then-rename", "the demo must say that the fallback was used")
}
