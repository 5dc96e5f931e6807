package main

// The line logs the daemon owns — the spool journal (state/journal.jsonl), the skip log
// (state/skipped.txt) and evals.jsonl — under the one rule of internal/wlog, in the
// real binary: a torn last line is cut, corruption in the middle is refused, and an
// append that fails with a full disk (injected: the binary is built with the fsfault
// tag, internal/wlog.FaultEnv) is cut off and retried.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/eval"
	"github.com/hindsight-ai/hindsight/internal/wlog"
	"github.com/hindsight-ai/hindsight/rollout"
)

// evalSuite is a config's eval section with one command suite (no model work).
const evalSuite = "eval:\n  budget: 0\n  suites:\n    - {name: ext, kind: command, command: [\"sh\", \"-c\", \"echo '{\\\"score\\\": 1}'\"]}\n"

// appendConfig adds top-level YAML to the config at path.
func appendConfig(t *testing.T, path, yaml string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(yaml)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// logLines returns the daemon's log lines that contain every one of parts.
func logLines(log string, parts ...string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// wholeLines returns the lines of the file at path, failing unless it ends with a
// whole line.
func wholeLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	if len(b) == 0 {
		return nil
	}
	require.Equal(t, byte('\n'), b[len(b)-1], "%s ends with a torn line", path)
	return strings.Split(string(b[:len(b)-1]), "\n")
}

// TestLineLogsDiskFull trains with skips for policy lag and a command eval after each
// checkpoint while one append to each line log fails with ENOSPC: the journal's in the
// middle of its write, the skip log's in the middle of its write, evals.jsonl's at its
// fsync. The journal and skip log writes pause the daemon and are retried; the eval
// result is logged as lost. Every file ends with whole lines only, each rollout is
// accepted once and trained or skipped, and the daemon restarts on them.
func TestLineLogsDiskFull(t *testing.T) {
	dataDir, path := spoolWithRollouts(t, 12, 2,
		"  token_budget: 1000000\n  max_batch_rollouts: 1\n  max_policy_lag: 1\n  idle_flush: 0s\n  checkpoint:\n    every_steps: 1\n")
	appendConfig(t, path, "disk_full_retry: 200ms\n"+evalSuite)
	fault := wlog.FaultEnv + "=journal.jsonl:3:write,skipped.txt:1:write,evals.jsonl:2:sync"
	p := startDaemonEnv(t, []string{"NOTIFY_SOCKET=", fault}, "-config", path)
	addr := p.waitReady(t)
	var trained, skipped int64
	deadline := time.Now().Add(3 * time.Minute)
	for {
		tr := statusOf(t, addr).GetTraining()
		trained, skipped = tr.GetRolloutsTrained(), tr.GetRolloutsSkipped()
		if trained+skipped == 12 && statusOf(t, addr).GetSpool().GetProcessing() == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "rollouts not trained or skipped in time:\n%s", p.log())
		time.Sleep(200 * time.Millisecond)
	}
	require.Positive(t, skipped, "with a step per rollout, some policy_version must lag by more than 1")
	p.stop(t, 2*time.Minute)
	log := p.log()

	// Each write failed once with a full disk, was cut off, and went on.
	state := filepath.Join(dataDir, "state")
	for _, file := range []string{"journal.jsonl", "skipped.txt"} {
		require.NotEmpty(t, logLines(log, `"message":"disk full:`, filepath.Join(state, file)+`"`, "no space left on device"),
			"no disk-full pause for %s:\n%s", file, log)
	}
	require.NotEmpty(t, logLines(log, `"message":"disk has room again`), log)
	lost := logLines(log, `"message":"record eval result"`, "no space left on device")
	require.Len(t, lost, 1, log)

	// The journal: whole lines, every rollout accepted once.
	lines := wholeLines(t, filepath.Join(state, "journal.jsonl"))
	accepted := map[string]int{}
	for _, l := range lines {
		var e rollout.Entry
		require.NoError(t, json.Unmarshal([]byte(l), &e), l)
		for _, r := range e.Rows {
			if r.Accepted {
				accepted[r.ID]++
			}
		}
	}
	require.Len(t, accepted, 12)
	for id, n := range accepted {
		require.Equal(t, 1, n, id)
	}
	// The skip log: one whole id per skip (its files are finished, but it is rewritten
	// only at the next start).
	skips := wholeLines(t, filepath.Join(state, "skipped.txt"))
	require.Len(t, skips, int(skipped))
	for _, id := range skips {
		require.Contains(t, accepted, id)
	}
	// evals.jsonl: every eval but the lost one, whole.
	evals := wholeLines(t, filepath.Join(dataDir, "evals.jsonl"))
	require.Len(t, evals, len(logLines(log, `"message":"eval"`))-1)
	for _, l := range evals {
		var r eval.Result
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		require.Equal(t, "ext", r.Suite)
	}

	p = startDaemon(t, "-config", path)
	p.waitReady(t)
	p.stop(t, time.Minute)
	require.Empty(t, wholeLines(t, filepath.Join(state, "skipped.txt")), "every file is finished: no skip is needed again")
	require.Len(t, wholeLines(t, filepath.Join(dataDir, "evals.jsonl")), len(evals))
}

// lineLogs writes a data directory whose three line logs hold whole lines: a journal
// with one finished claim, a skip log with two ids, evals.jsonl with two results. It
// returns a training config with an eval suite over it, and the logs' paths.
func lineLogs(t *testing.T) (cfg string, journal, skips, evals string) {
	t.Helper()
	dataDir := t.TempDir()
	state := filepath.Join(dataDir, "state")
	require.NoError(t, os.MkdirAll(filepath.Join(dataDir, "spool", "incoming"), 0o755))
	require.NoError(t, os.MkdirAll(state, 0o755))
	journal, skips, evals = filepath.Join(state, "journal.jsonl"), filepath.Join(state, "skipped.txt"), filepath.Join(dataDir, "evals.jsonl")
	j, err := rollout.OpenJournal(journal)
	require.NoError(t, err)
	c, err := j.Claim("gone.arrow")
	require.NoError(t, err)
	require.NoError(t, j.Finish(c.Seq, rollout.OutcomeVanished, "", ""))
	require.NoError(t, j.Close())
	require.NoError(t, os.WriteFile(skips, []byte("old-1\nold-2\n"), 0o644))
	rec, err := eval.OpenRecorder(evals)
	require.NoError(t, err)
	for step := range int64(2) {
		require.NoError(t, rec.Record(eval.Result{Time: time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC), Step: step + 1, Suite: "ext",
			Kind: eval.KindCommand, Primary: "score", Metrics: map[string]float64{"score": 0.5}, Complete: true}))
	}
	require.NoError(t, rec.Close())
	cfg = trainConfig(t, dataDir)
	appendConfig(t, cfg, evalSuite)
	return cfg, journal, skips, evals
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestLineLogsTornTail: a crash mid-append leaves a torn last line in each log; the
// daemon cuts each (the skip log's old ids go too: their files are finished), exits
// 0, and starts again on what it left.
func TestLineLogsTornTail(t *testing.T) {
	cfg, journal, skips, evals := lineLogs(t)
	goodJournal, goodEvals := readString(t, journal), readString(t, evals)
	appendConfig(t, journal, `{"op":"claim","seq":2,"at":"2026-12-0`)
	appendConfig(t, skips, "old-")
	appendConfig(t, evals, `{"time":"2026-12-03T00:00:00Z","step":2,"suite":"e`)
	for range 2 {
		p := startDaemon(t, "-config", cfg)
		addr := p.waitReady(t)
		st := statusOf(t, addr)
		require.Len(t, st.GetEvals(), 1)
		require.Equal(t, int64(2), st.GetEvals()[0].GetStep(), "the whole results are read, the torn one is not")
		require.Equal(t, int64(1), st.GetTotal().GetFilesClaimed(), "the torn claim is not read")
		p.stop(t, time.Minute)
		require.Equal(t, goodJournal, readString(t, journal))
		require.Equal(t, "", readString(t, skips))
		require.Equal(t, goodEvals, readString(t, evals))
	}
}

// TestLineLogsCorruptMiddle: garbage with whole lines after it, in any of the three
// logs, stops the daemon at start with the file, the line and its byte offset, and
// leaves the file as it was: nothing after the garbage is dropped.
func TestLineLogsCorruptMiddle(t *testing.T) {
	for _, name := range []string{"journal", "skip log", "evals"} {
		t.Run(name, func(t *testing.T) {
			cfg, journal, skips, evals := lineLogs(t)
			path := map[string]string{"journal": journal, "skip log": skips, "evals": evals}[name]
			good := readString(t, path)
			first := good[:strings.IndexByte(good, '\n')+1]
			body := first + "\x00\x00garbage\x00\n" + good[len(first):]
			require.NoError(t, os.WriteFile(path, []byte(body), 0o644))

			p := startDaemon(t, "-config", cfg)
			require.NotEqual(t, 0, p.wait(t, time.Minute), p.log())
			want := fmt.Sprintf("%s: line 2 is corrupt (byte offset %d)", path, len(first))
			require.NotEmpty(t, logLines(p.log(), `"level":"error"`, want), "want %q in:\n%s", want, p.log())
			require.Equal(t, body, readString(t, path), "the file is left as it was")
		})
	}
}
