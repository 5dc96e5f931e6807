package data

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCreditFileRoundTrip(t *testing.T) {
	nan := float32(math.NaN())
	rows := []CreditRow{
		{RolloutID: "a", TaskID: "t1", Tokens: []int32{1, 2, 3}, Step: 4, PolicyVersion: 2, TeacherVersion: 3,
			Reward: 0.5, HasReward: true, OutcomeAdv: 0.25, LossMask: []bool{false, true, true},
			Student: []float32{0, -1, -2}, Teacher: []float32{nan, -0.5, nan}, Advantages: []float32{0, 0.3, 0.25},
			Hints: []CreditHint{{Segment: 2, InsertAt: 1, End: 2, Source: "rules", Reason: "tool_error", Text: "try x", Tokens: []int32{9, 8}}}},
		{RolloutID: "b", Tokens: []int32{5}, LossMask: []bool{false}, Student: []float32{0}, Teacher: []float32{nan}, Advantages: []float32{0}},
	}
	path := filepath.Join(t.TempDir(), "out", "x"+CreditSuffix)
	ok, err := PublishCreditFile(path, rows)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = PublishCreditFile(path, rows[:1])
	require.NoError(t, err)
	require.False(t, ok, "a published file is never replaced")

	got, err := ReadCreditFile(path)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.True(t, math.IsNaN(float64(got[0].Teacher[0])))
	got[0].Teacher[0], got[0].Teacher[2], rows[0].Teacher[0], rows[0].Teacher[2] = 0, 0, 0, 0
	got[1].Teacher[0], rows[1].Teacher[0] = 0, 0
	require.Equal(t, rows[0], got[0])
	require.Equal(t, "", got[1].TaskID)
	require.False(t, got[1].HasReward)
	require.Empty(t, got[1].Hints)

	staged := filepath.Join(t.TempDir(), "r.arrow")
	require.NoError(t, WriteCreditFile(staged, rows[1:], false))
	require.NoError(t, SyncFiles([]string{staged}))
	got, err = ReadCreditFile(staged)
	require.NoError(t, err)
	require.Equal(t, "b", got[0].RolloutID)

	require.Error(t, WriteCreditFile(staged, []CreditRow{{RolloutID: "c", Tokens: []int32{1}}}, true))
}
