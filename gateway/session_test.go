package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/rollout"
)

func mustRaw(ss ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(ss))
	for i, s := range ss {
		out[i] = json.RawMessage(s)
	}
	return out
}

// TestJournalDropsTornTurn: a turn whose journal line a crash cut short was never
// acknowledged; reopening drops it, keeps the turns before it, and appends cleanly.
func TestJournalDropsTornTurn(t *testing.T) {
	dir := t.TempDir()
	s := &session{id: "s1", version: -1}
	lp := float32(-0.5)
	require.NoError(t, s.appendTurn(dir, &turnRecord{Turn: 1, Messages: []chatMessage{{Role: "user", Content: "hi"}},
		Tokens: []int32{1, 2, 3}, LogProbs: []*float32{nil, nil, &lp},
		Segments:      []segRecord{{Start: 0, End: 2, Kind: "user", Status: -1}, {Start: 2, End: 3, Kind: "assistant", Status: -1}},
		PolicyVersion: 4, Tokenizer: "bytes-v1"}))
	s.journal.Close()
	path := journalPath(dir, "s1")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"turn":2,"messages":[{"role":"us`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	got, err := readJournal(path, "s1")
	require.NoError(t, err)
	require.Equal(t, 1, got.turns)
	require.Equal(t, []int32{1, 2, 3}, got.tokens)
	require.Equal(t, []bool{false, false, true}, got.valid)
	require.NoError(t, got.appendTurn(dir, &turnRecord{Turn: 2, Messages: got.messages, Tokens: []int32{4}, LogProbs: []*float32{&lp},
		Segments: []segRecord{{Start: 3, End: 4, Kind: "assistant", Status: -1}}, PolicyVersion: 5, Tokenizer: "bytes-v1"}))
	got.journal.Close()
	again, err := readJournal(path, "s1")
	require.NoError(t, err)
	require.Equal(t, 2, again.turns)
	require.Equal(t, int64(4), again.version, "the oldest policy that sampled a turn")
	again.journal.Close()

	incoming := filepath.Join(t.TempDir(), "incoming")
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	late, err := OpenLateFeedback(filepath.Join(t.TempDir(), "feedback"))
	require.NoError(t, err)
	file, err := again.emit(dir, incoming, late)
	require.NoError(t, err)
	require.NoFileExists(t, path)
	r, err := rollout.OpenReader(file, rollout.ReadOptions{})
	require.NoError(t, err)
	defer r.Close()
	require.True(t, r.Next())
	require.Empty(t, r.Problems())
	ro := r.Rollout()
	require.Equal(t, []int32{1, 2, 3, 4}, ro.Tokens)
	_, ok := ro.LogProb(0)
	require.False(t, ok)
	v, ok := ro.LogProb(3)
	require.True(t, ok)
	require.Equal(t, lp, v)
}
