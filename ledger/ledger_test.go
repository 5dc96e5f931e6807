package ledger

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/rollout"
)

// world is a data directory with a spool holding one decided file of n rollouts.
type world struct {
	root  string
	spool *rollout.Spool
	file  *File
	ids   []string
	// finishErr, when set, fails the next Finish (a crash before the spool finished).
	finishErr error
}

func newWorld(t *testing.T, n int) *world {
	t.Helper()
	w := &world{root: t.TempDir()}
	w.openSpool(t)
	rs := make([]*rollout.Rollout, n)
	for i := range rs {
		rs[i] = rollout.Synthesize(rollout.SynthOptions{Tokens: 64, Seed: 3, IDPrefix: "l"}, i)
		w.ids = append(w.ids, rs[i].ID)
	}
	require.NoError(t, rollout.WriteFile(filepath.Join(w.spool.Dir(rollout.DirIncoming), "a.arrow"), rs, rollout.WriteOptions{}))
	c, err := w.spool.Claim("a.arrow")
	require.NoError(t, err)
	rep, err := w.spool.Process(t.Context(), c)
	require.NoError(t, err)
	require.Equal(t, n, rep.Accepted)
	w.file = &File{Claim: c, Report: rep}
	return w
}

func (w *world) openSpool(t *testing.T) {
	t.Helper()
	if w.spool != nil {
		require.NoError(t, w.spool.Close())
	}
	s, err := rollout.OpenSpool(filepath.Join(w.root, "spool"), filepath.Join(w.root, "state", "journal.jsonl"), rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	w.spool = s
}

// open opens a ledger as the daemon does at start-up; trained is the restored
// checkpoint's list.
func (w *world) open(t *testing.T, trained ...string) *Ledger {
	t.Helper()
	l, err := Open(Options{
		SkipLog:    filepath.Join(w.root, "state", "skipped.txt"),
		StagingDir: filepath.Join(w.root, "state", "credit"),
		OutputDir:  filepath.Join(w.root, "outputs"),
		Unfinished: w.spool.Journal().Unfinished(),
		Finish: func(_ context.Context, c *rollout.ClaimState, rep *rollout.FileReport) error {
			if err := w.finishErr; err != nil {
				w.finishErr = nil
				return err
			}
			return w.spool.Finish(c, rep)
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	l.Restore(trained, 0)
	return l
}

func (w *world) creditPath() string {
	return CreditPath(filepath.Join(w.root, "outputs"), w.file.Report.Claimed)
}

func row(id string) creditfile.Row {
	return creditfile.Row{RolloutID: id, Tokens: []int32{1, 2}, LossMask: []bool{false, true},
		Student: []float32{0, -1}, Teacher: []float32{0, -1}, Advantages: []float32{0, 0.5}}
}

func TestLedgerFinishesOnlyAfterTheCheckpoint(t *testing.T) {
	w := newWorld(t, 2)
	l := w.open(t)
	ctx := t.Context()
	for i, id := range w.ids {
		require.NoError(t, l.Stage(ctx, w.file, i, row(id)))
	}
	f, err := l.End(ctx, w.file, 0)
	require.NoError(t, err)
	require.Nil(t, f, "staged is not trained: no checkpoint lists the rollouts yet")
	require.EqualValues(t, 1, l.Awaiting())
	require.NoFileExists(t, w.creditPath())

	require.NoError(t, l.Sync())
	done, err := l.Checkpointed(ctx)
	require.NoError(t, err)
	require.Len(t, done, 1)
	require.Equal(t, 2, done[0].Rows)
	require.Empty(t, l.Trained(), "a finished file's rollouts leave the trained list")
	require.EqualValues(t, 2, l.TrainedTotal(), "and stay in the count")
	require.Equal(t, rollout.OutcomeDone, done[0].Report.Outcome)
	rows, err := creditfile.Read(w.creditPath())
	require.NoError(t, err)
	require.Equal(t, w.ids[0], rows[0].RolloutID)
	require.Equal(t, w.ids[1], rows[1].RolloutID)
	require.NoDirExists(t, filepath.Join(w.root, "state", "credit", "00000001-a"))
	require.Zero(t, l.Awaiting())
}

// TestLedgerCrashBeforeCheckpoint: rows staged, no checkpoint; after the crash
// nothing counts as trained, the file is unfinished and its staging stays (the
// replay overwrites it row by row).
func TestLedgerCrashBeforeCheckpoint(t *testing.T) {
	w := newWorld(t, 2)
	l := w.open(t)
	require.NoError(t, l.Stage(t.Context(), w.file, 0, row(w.ids[0])))
	require.NoError(t, l.Sync())

	w.openSpool(t) // crash: reopen everything
	l = w.open(t)
	require.False(t, l.Before(w.ids[0]))
	require.True(t, l.Unfinished(w.ids[0]))
	require.FileExists(t, filepath.Join(w.root, "state", "credit", "00000001-a", "000000.arrow"))
	require.NotNil(t, w.spool.Journal().Open(w.file.Claim.Seq))
}

// TestLedgerCrashAfterPublish: the credit file was published but the spool did not
// finish the file; the restart finishes it without publishing again.
func TestLedgerCrashAfterPublish(t *testing.T) {
	w := newWorld(t, 1)
	l := w.open(t)
	ctx := t.Context()
	require.NoError(t, l.Stage(ctx, w.file, 0, row(w.ids[0])))
	require.NoError(t, l.Sync())
	w.finishErr = errors.New("crash")
	_, err := l.End(ctx, w.file, 0)
	require.NoError(t, err)
	_, err = l.Checkpointed(ctx)
	require.ErrorContains(t, err, "crash")
	require.FileExists(t, w.creditPath())
	// Mark the published file, to see that it is not replaced.
	st, err := os.Stat(w.creditPath())
	require.NoError(t, err)

	w.openSpool(t)
	l = w.open(t, w.ids[0]) // the checkpoint lists it
	require.True(t, l.Before(w.ids[0]))
	f, err := l.End(ctx, &File{Claim: w.spool.Journal().Open(w.file.Claim.Seq), Report: &rollout.FileReport{
		Seq: w.file.Report.Seq, Name: w.file.Report.Name, Claimed: w.file.Report.Claimed, Accepted: 1}}, 1)
	require.NoError(t, err)
	require.NotNil(t, f)
	require.Equal(t, rollout.OutcomeDone, f.Report.Outcome)
	st2, err := os.Stat(w.creditPath())
	require.NoError(t, err)
	require.Equal(t, st.ModTime(), st2.ModTime(), "published once")
	rows, err := creditfile.Read(w.creditPath())
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.EqualValues(t, 1, w.spool.Journal().Totals().FilesDone)
}

// TestLedgerCrashAfterFinish: the file was finished but its staging folder and its
// skips outlived it; the next Open removes both.
func TestLedgerCrashAfterFinish(t *testing.T) {
	w := newWorld(t, 2)
	l := w.open(t)
	ctx := t.Context()
	_, err := l.Skip(ctx, w.file, w.ids[1])
	require.NoError(t, err)
	require.NoError(t, l.Stage(ctx, w.file, 0, row(w.ids[0])))
	require.NoError(t, l.Sync())
	stale := filepath.Join(w.root, "state", "credit", "00000001-a")
	require.NoError(t, os.MkdirAll(filepath.Join(w.root, "keep"), 0o755))
	require.NoError(t, os.CopyFS(filepath.Join(w.root, "keep", "stage"), os.DirFS(stale)))
	_, err = l.End(ctx, w.file, 0)
	require.NoError(t, err)
	done, err := l.Checkpointed(ctx)
	require.NoError(t, err)
	require.Len(t, done, 1)
	require.NoError(t, os.CopyFS(stale, os.DirFS(filepath.Join(w.root, "keep", "stage")))) // as if not removed

	w.openSpool(t)
	l = w.open(t)
	require.NoDirExists(t, stale)
	require.False(t, l.Before(w.ids[1]), "the skips of finished files are dropped")
	b, err := os.ReadFile(filepath.Join(w.root, "state", "skipped.txt"))
	require.NoError(t, err)
	require.Empty(t, b)
}

// TestLedgerSkipLogTornLine: a crash in the middle of a skip's line leaves a torn
// last line; it is cut off, the whole lines before it stand.
func TestLedgerSkipLogTornLine(t *testing.T) {
	w := newWorld(t, 3)
	l := w.open(t)
	_, err := l.Skip(t.Context(), w.file, w.ids[0])
	require.NoError(t, err)
	require.NoError(t, l.Close())
	path := filepath.Join(w.root, "state", "skipped.txt")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(w.ids[1][:3])
	require.NoError(t, err)
	require.NoError(t, f.Close())

	l = w.open(t)
	require.True(t, l.Before(w.ids[0]))
	require.False(t, l.Before(w.ids[1]))
	_, err = l.Skip(t.Context(), w.file, w.ids[2])
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, w.ids[0]+"\n"+w.ids[2]+"\n", string(b))
}

// TestLedgerRestoreKeepsUnfinished: a checkpoint's trained ids of finished files do
// not count (those files are never read again).
func TestLedgerRestoreKeepsUnfinished(t *testing.T) {
	w := newWorld(t, 1)
	l := w.open(t, w.ids[0], "from-a-finished-file")
	require.True(t, l.Before(w.ids[0]))
	require.False(t, l.Before("from-a-finished-file"))
	require.False(t, l.Unfinished("from-a-finished-file"))
}

// TestLedgerTrainedList: Stage adds a rollout to the trained list in step order,
// a finished file's rollouts leave it (not the count), and a restart from the
// checkpoint that listed them trains on from the same list and count.
func TestLedgerTrainedList(t *testing.T) {
	w := newWorld(t, 3)
	l := w.open(t)
	ctx := t.Context()
	for _, i := range []int{1, 0} {
		require.NoError(t, l.Stage(ctx, w.file, i, row(w.ids[i])))
	}
	require.Equal(t, []string{w.ids[1], w.ids[0]}, l.Trained(), "step order")
	require.EqualValues(t, 2, l.TrainedTotal())
	require.NoError(t, l.Sync())
	_, err := l.Checkpointed(ctx)
	require.NoError(t, err)
	listed, total := l.Trained(), l.TrainedTotal()

	w.openSpool(t) // crash after the checkpoint: reopen from what it listed
	l = w.open(t)
	l.Restore(append(listed, "from-a-finished-file"), total+5)
	require.Equal(t, listed, l.Trained(), "only unfinished files' rollouts")
	require.EqualValues(t, total+5, l.TrainedTotal())
	require.NoError(t, l.Stage(ctx, w.file, 2, row(w.ids[2])))
	f, err := l.End(ctx, w.file, 2)
	require.NoError(t, err)
	require.Nil(t, f)
	require.NoError(t, l.Sync())
	done, err := l.Checkpointed(ctx)
	require.NoError(t, err)
	require.Len(t, done, 1)
	require.Empty(t, l.Trained())
	require.EqualValues(t, total+6, l.TrainedTotal())
}
