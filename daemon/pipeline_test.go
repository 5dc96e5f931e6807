package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/train"
)

// TestFeedKeptRows: a file whose accepted rows ingest kept is fed from them, in row
// order, skipping those trained before, without reading the spool (there is none
// here), and ends with the file's end marker counting the skipped ones.
func TestFeedKeptRows(t *testing.T) {
	var kept keptRows
	var ids []string
	for i, row := range []int{0, 2, 3} {
		r := rollout.Synthesize(rollout.SynthOptions{}, i)
		kept.add(row, r)
		ids = append(ids, r.ID)
	}
	q := newQueues(1)
	f := &decidedFile{File: &ledger.File{Report: &rollout.FileReport{Claimed: "00000001-a.arrow"}}, rows: kept.final()}
	q.files <- f
	close(q.files)
	go func() { // the teacher: take the work queue as it comes
		for range q.work {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- feed(t.Context(), nil, q, func(id string) bool { return id == ids[1] }, nil) }()

	var got []*train.Item
	for it := range q.ordered {
		got = append(got, it)
	}
	require.NoError(t, <-done)
	require.Len(t, got, 3)
	require.Equal(t, []int{0, 3}, []int{got[0].Row, got[1].Row})
	require.Equal(t, []string{ids[0], ids[2]}, []string{got[0].Rollout.ID, got[1].Rollout.ID})
	require.True(t, got[2].End)
	require.Equal(t, 1, got[2].Already)
}

// TestKeptRowsBound: past keepTokensMax tokens a file's rows are dropped, and final
// returns nil, so feed streams that file from the spool instead of holding it.
func TestKeptRowsBound(t *testing.T) {
	var k keptRows
	r := rollout.Synthesize(rollout.SynthOptions{}, 0)
	k.add(0, r)
	require.Len(t, k.final(), 1)
	big := &rollout.Rollout{ID: "big", Tokens: make([]int32, keepTokensMax)}
	k.add(1, big)
	require.Nil(t, k.final())
	k.add(2, r)
	require.Nil(t, k.final(), "once over, the file stays streamed")
}
