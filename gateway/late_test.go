package gateway

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/rollout"
)

// lateRollout is a written session's rollout: user, reply, user, reply.
func lateRollout() *rollout.Rollout {
	return &rollout.Rollout{ID: "s1", Tokens: make([]int32, 8), Segments: []rollout.Segment{
		{Start: 0, End: 2, Kind: rollout.KindUser}, {Start: 2, End: 4, Kind: rollout.KindAssistant},
		{Start: 4, End: 6, Kind: rollout.KindUser}, {Start: 6, End: 8, Kind: rollout.KindAssistant}}}
}

// TestLateFeedback: a record before the take is joined (every time the rollout is
// read for training, also after a reopen), one after it is late and never joined,
// one on an unknown session or turn is refused, and the counts survive a reopen.
func TestLateFeedback(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "feedback")
	l, err := OpenLateFeedback(dir)
	require.NoError(t, err)
	down, up := int8(-1), int8(1)
	_, _, err = l.Add("s1", &down, "", 0)
	require.ErrorIs(t, err, ErrNoSession)

	require.NoError(t, l.Written("s1", []int{1, 3}))
	_, _, err = l.Add("s1", nil, "x", 3)
	var bad *TurnError
	require.ErrorAs(t, err, &bad)
	turn, late, err := l.Add("s1", nil, "use ls first", 1)
	require.NoError(t, err)
	require.Equal(t, 1, turn)
	require.False(t, late)
	turn, late, err = l.Add("s1", &down, "", 0)
	require.NoError(t, err)
	require.Equal(t, 2, turn, "turn 0 is the last")
	require.False(t, late)
	require.Equal(t, LateCounts{Pending: 2}, l.Counts())

	other := &rollout.Rollout{ID: "not-a-session"}
	n, err := l.Join(other)
	require.NoError(t, err)
	require.Zero(t, n)

	r := lateRollout()
	n, err = l.Join(r)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, r.HasFeedback)
	require.Equal(t, int8(-1), r.Feedback)
	require.Equal(t, "use ls first", r.Segments[1].Feedback)
	require.Empty(t, r.Segments[3].Feedback)
	require.Equal(t, LateCounts{Joined: 2}, l.Counts())

	_, late, err = l.Add("s1", &up, "too late", 2)
	require.NoError(t, err)
	require.True(t, late, "after the take")
	require.Equal(t, LateCounts{Joined: 2, Late: 1}, l.Counts())

	// A restart (reopen) reads the rollout again before its checkpoint: the same
	// records are joined, exactly once each; the late one never is.
	again, err := OpenLateFeedback(dir)
	require.NoError(t, err)
	require.Equal(t, LateCounts{Joined: 2, Late: 1}, again.Counts())
	r2 := lateRollout()
	n, err = again.Join(r2)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, int8(-1), r2.Feedback)
	require.Equal(t, "use ls first", r2.Segments[1].Feedback)
	require.Empty(t, r2.Segments[3].Feedback)
	_, late, err = again.Add("s1", nil, "still late", 1)
	require.NoError(t, err)
	require.True(t, late)

	// Written again (a re-emit after a crash) keeps the records and the take.
	require.NoError(t, again.Written("s1", []int{1, 3}))
	require.Equal(t, LateCounts{Joined: 2, Late: 2}, again.Counts())

	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1, "one file per session, no temp files left")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "s2.json"), []byte(`{"session":"s3"}`), 0o644))
	_, err = OpenLateFeedback(dir)
	require.ErrorContains(t, err, "s2.json")
}
