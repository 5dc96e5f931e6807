package ledger

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/wlog"
	"github.com/hindsight-ai/hindsight/rollout"
)

// TestLedgerSkipLogCorruptMiddle: a line that is not an id, with whole lines after it,
// is not a torn append: the ledger refuses the skip log, naming it, the line and its
// byte offset, and leaves it as it is (cutting there would take the later skips
// again).
func TestLedgerSkipLogCorruptMiddle(t *testing.T) {
	w := newWorld(t, 3)
	l := w.open(t)
	for _, id := range w.ids[:2] {
		_, err := l.Skip(t.Context(), w.file, id)
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	path := filepath.Join(w.root, "state", "skipped.txt")
	body := w.ids[0] + "\n\x00\x00\x00\n" + w.ids[1] + "\n"
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))

	_, err := Open(Options{SkipLog: path, StagingDir: filepath.Join(w.root, "state", "credit"),
		OutputDir: filepath.Join(w.root, "outputs"), Unfinished: w.spool.Journal().Unfinished(),
		Finish: func(context.Context, *rollout.ClaimState, *rollout.FileReport) error { return nil }})
	var ce *wlog.CorruptionError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 2, ce.Line)
	require.ErrorContains(t, err, path+": line 2 is corrupt (byte offset "+itoa(len(w.ids[0])+1)+")")
	b, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	require.Equal(t, body, string(b))
}

// TestLedgerSkipLogDiskFull: a skip whose append fails with a full disk, in the middle
// of the write or at its fsync, is cut off and not counted; its retry lands on a clean
// line, and the log reopens with every skip.
func TestLedgerSkipLogDiskFull(t *testing.T) {
	for _, phase := range []string{wlog.FaultWrite, wlog.FaultSync} {
		t.Run(phase, func(t *testing.T) {
			w := newWorld(t, 3)
			l := w.open(t)
			path := filepath.Join(w.root, "state", "skipped.txt")
			_, err := l.Skip(t.Context(), w.file, w.ids[0])
			require.NoError(t, err)
			defer wlog.InjectFault(wlog.Fault{Name: "skipped.txt", Append: 1, Phase: phase})()
			_, err = l.Skip(t.Context(), w.file, w.ids[1])
			require.ErrorIs(t, err, syscall.ENOSPC)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, w.ids[0]+"\n", string(b), "the failed append is cut off")
			_, err = l.Skip(t.Context(), w.file, w.ids[1]) // the retry
			require.NoError(t, err)
			require.NoError(t, l.Close())

			l = w.open(t)
			require.True(t, l.Before(w.ids[0]))
			require.True(t, l.Before(w.ids[1]))
			require.False(t, l.Before(w.ids[2]))
		})
	}
}

// TestSkipLogOddIDs: a rollout_id with a newline, a control character, invalid UTF-8
// or a leading quote is written quoted and read back as itself; plain ids stay plain.
func TestSkipLogOddIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "skipped.txt")
	ids := []string{"plain-1", "two\nlines", "tab\there", "bad\xffutf8", `"quoted"`, "ünïcode"}
	keep := map[string]bool{}
	for _, id := range ids {
		keep[id] = true
	}
	l, err := openSkipLog(path, keep)
	require.NoError(t, err)
	for _, id := range ids {
		require.NoError(t, l.add(id))
	}
	require.NoError(t, l.close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "plain-1\n\"two\\nlines\"\n\"tab\\there\"\n\"bad\\xffutf8\"\n\"\\\"quoted\\\"\"\nünïcode\n", string(b))
	l, err = openSkipLog(path, keep)
	require.NoError(t, err)
	defer l.close()
	require.Equal(t, keep, l.ids)
}

func itoa(n int) string { return strconv.Itoa(n) }
