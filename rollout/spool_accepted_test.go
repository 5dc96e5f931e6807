package rollout

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpoolAccepted streams only the accepted rows, in row order, of a decided file,
// also from a fresh ClaimState (the journal holds the decisions), and stops early
// when asked.
func TestSpoolAccepted(t *testing.T) {
	root := t.TempDir()
	s := openTestSpool(t, root)
	rs := synthRollouts("acc", 4)
	rs[2].LogProbs = append([]float32(nil), rs[2].LogProbs...)
	rs[2].LogProbs[len(rs[2].LogProbs)-1] = float32(0.5) // a log-prob > 0: rejected
	drop(t, s, "a.arrow", rs)
	c, err := s.Claim("a.arrow")
	require.NoError(t, err)
	rep, err := s.Process(t.Context(), c)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Accepted, "%v", rep.Problems)

	var rows []int
	var ids []string
	require.NoError(t, s.Accepted(c, func(row int, r *Rollout) bool {
		rows, ids = append(rows, row), append(ids, r.ID)
		return true
	}))
	require.Equal(t, []int{0, 1, 3}, rows)
	require.Equal(t, []string{rs[0].ID, rs[1].ID, rs[3].ID}, ids)

	fresh := &ClaimState{Seq: c.Seq, Name: c.Name}
	n := 0
	require.NoError(t, s.Accepted(fresh, func(int, *Rollout) bool { n++; return n < 2 }))
	require.Equal(t, 2, n, "stopped after the second row")

	require.NoError(t, s.Finish(c, rep))
	require.ErrorContains(t, s.Accepted(fresh, func(int, *Rollout) bool { return true }), "not decided")
}

// TestSpoolFinishIdempotent finishes a file whose rename happened but whose journal
// entry did not (a full disk while journaling), and finishes a finished file again:
// both end with the file in done/ and one finish in the journal.
func TestSpoolFinishIdempotent(t *testing.T) {
	root := t.TempDir()
	s := openTestSpool(t, root)
	drop(t, s, "a.arrow", synthRollouts("fin", 2))
	c, err := s.Claim("a.arrow")
	require.NoError(t, err)
	rep, err := s.Process(t.Context(), c)
	require.NoError(t, err)

	// The rename of an earlier attempt, without its journal entry.
	claimed := c.ClaimedName()
	require.NoError(t, os.Rename(filepath.Join(s.Dir(DirProcessing), claimed), filepath.Join(s.Dir(DirDone), claimed)))
	require.NotNil(t, s.Journal().Open(c.Seq))
	require.NoError(t, s.Finish(c, rep))
	require.Nil(t, s.Journal().Open(c.Seq))
	require.Equal(t, OutcomeDone, rep.Outcome)
	require.Equal(t, filepath.Join(s.Dir(DirDone), claimed), rep.Dest)

	again := &FileReport{Seq: rep.Seq, Name: rep.Name, Claimed: rep.Claimed, Accepted: rep.Accepted}
	require.NoError(t, s.Finish(c, again))
	require.Equal(t, rep.Dest, again.Dest)
	require.EqualValues(t, 1, s.Journal().Totals().FilesDone)
	require.FileExists(t, rep.Dest)
}

// TestSpoolProcessRows: the rows ProcessRows keeps while deciding a file are the rows
// and rollouts Accepted streams from it afterwards, for a new claim and for a claim
// decided before (a restart), so training needs no second read.
func TestSpoolProcessRows(t *testing.T) {
	root := t.TempDir()
	s := openTestSpool(t, root)
	rs := synthRollouts("keep", 5)
	rs[1].LogProbs = append([]float32(nil), rs[1].LogProbs...)
	rs[1].LogProbs[len(rs[1].LogProbs)-1] = float32(0.5) // a log-prob > 0: rejected
	drop(t, s, "a.arrow", rs)
	c, err := s.Claim("a.arrow")
	require.NoError(t, err)

	type kept struct {
		row int
		r   *Rollout
	}
	collect := func(c *ClaimState) []kept {
		var got []kept
		rep, err := s.ProcessRows(t.Context(), c, func(row int, r *Rollout) { got = append(got, kept{row, r.Clone()}) })
		require.NoError(t, err)
		require.Equal(t, 4, rep.Accepted, "%v", rep.Problems)
		return got
	}
	got := collect(c)
	var streamed []kept
	require.NoError(t, s.Accepted(c, func(row int, r *Rollout) bool {
		streamed = append(streamed, kept{row, r.Clone()})
		return true
	}))
	require.Equal(t, streamed, got)
	require.Equal(t, []int{0, 2, 3, 4}, []int{got[0].row, got[1].row, got[2].row, got[3].row})

	again := collect(&ClaimState{Seq: c.Seq, Name: c.Name, Decided: true, Decisions: c.Decisions})
	require.Equal(t, got, again, "a decided claim keeps the same rows")
}
