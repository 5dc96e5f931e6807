package daemon

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestRemoveTemps lays out every temp entry an interrupted durable write can leave,
// beside the real files of the same folders, and checks that start-up removes the
// temps (logging each), finishes an interrupted model replacement, and keeps the rest.
func TestRemoveTemps(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	d := cfg.DataDir
	p := func(rel string) string { return filepath.Join(d, filepath.FromSlash(rel)) }
	file := func(rel string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p(rel)), 0o755))
		require.NoError(t, os.WriteFile(p(rel), []byte(rel), 0o644))
	}
	temps := []string{
		"outputs/.00000003-a.credit.arrow.tmp-123456",        // PublishCreditFile
		"checkpoints/.tmp-step-000004-987/model.safetensors", // WriteCheckpoint's directory
		"checkpoints/.latest.tmp",                            // pointLatest
		"state/.journal.jsonl.tmp-42",                        // journal compaction
		"state/.skipped.txt.tmp-7",                           // skip log (fsutil.WriteFile)
		"state/credit/00000003-a/.000001.arrow.tmp-99",       // staged credit rows
		"state/teacher-cache/ab/.tmp-5",                      // hint cache entry
		"spool/failed/.00000002-b.error.tmp-8",               // the .error file
		"spool/failed/00000002-b.rejected.arrow.tmp",         // rejected rows
		"spool/processing/.x.tmp-3",                          // any durable write there
		".fsprobe-77/a",                                      // a probe cut short
		".model.tmp-11/config.json",                          // a new model directory
	}
	keep := []string{
		"outputs/00000001-a.credit.arrow",
		"checkpoints/step-000002/model.safetensors",
		"state/journal.jsonl",
		"state/credit/00000003-a/000001.arrow",
		"state/teacher-cache/ab/cd.json",
		"spool/failed/00000002-b.arrow",
		"spool/failed/00000002-b.rejected.arrow",
		"spool/done/00000001-a.arrow",
		"spool/incoming/collector-001.arrow.tmp", // a collector's write in progress
		"spool/incoming/.hidden.tmp-4",           // incoming/ belongs to the collectors
		"model/config.json",
	}
	for _, f := range append(append([]string{}, temps...), keep...) {
		file(f)
	}
	require.NoError(t, os.Symlink("step-000002", p("checkpoints/latest")))
	// A replaced model directory whose replacement is in place, and a data dir whose
	// "policy" directory was moved aside just before the crash.
	file(".model.old-12/config.json")
	file(".policy.old-13/config.json")

	var logs bytes.Buffer
	require.NoError(t, removeTemps(cfg, zerolog.New(&logs)))
	for _, f := range temps {
		_, err := os.Lstat(p(f))
		require.ErrorIs(t, err, os.ErrNotExist, "%s survived", f)
	}
	for _, f := range keep {
		require.FileExists(t, p(f))
	}
	require.NoDirExists(t, p(".tmp-step-000004-987"))
	require.NoDirExists(t, p(".model.old-12"))
	require.FileExists(t, p("policy/config.json"), "the moved-aside directory is moved back")
	require.NoDirExists(t, p(".policy.old-13"))
	target, err := os.Readlink(p("checkpoints/latest"))
	require.NoError(t, err)
	require.Equal(t, "step-000002", target)
	require.Equal(t, len(temps), strings.Count(logs.String(), "removed the temp file"), logs.String())

	// A second start finds nothing to do.
	logs.Reset()
	require.NoError(t, removeTemps(cfg, zerolog.New(&logs)))
	require.Empty(t, logs.String())
}
