package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/wlog"
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

// turnN is turn n of a test conversation: one user token and one sampled token.
func turnN(n int) *turnRecord {
	lp := float32(-0.25)
	at := int32(2 * (n - 1))
	return &turnRecord{Turn: n, Messages: []chatMessage{{Role: "user", Content: fmt.Sprint("turn ", n)}},
		Tokens: []int32{at, at + 1}, LogProbs: []*float32{nil, &lp},
		Segments:      []segRecord{{Start: at, End: at + 1, Kind: "user", Status: -1}, {Start: at + 1, End: at + 2, Kind: "assistant", Status: -1}},
		PolicyVersion: 1, Tokenizer: "bytes-v1"}
}

// TestJournalCorruptMiddleRefused: a line that does not decode with turns after it is
// not a torn append: reopening refuses the journal, naming it, the line and its byte
// offset, and leaves it as it was, instead of dropping the acknowledged turns after
// the garbage.
func TestJournalCorruptMiddleRefused(t *testing.T) {
	dir := t.TempDir()
	s := &session{id: "s1", version: -1}
	for n := 1; n <= 3; n++ {
		require.NoError(t, s.appendTurn(dir, turnN(n)))
	}
	require.NoError(t, s.journal.Close())
	path := journalPath(dir, "s1")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	first := bytes.IndexByte(b, '\n') + 1
	body := string(b[:first]) + "{\"turn\":2,\"mess\x00\x00\n" + string(b[first:])
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))

	_, err = readJournal(path, "s1")
	require.ErrorContains(t, err, fmt.Sprintf("%s: line 2 is corrupt (byte offset %d)", path, first))
	after, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	require.Equal(t, body, string(after), "the journal is left as it was")
}

// TestJournalDiskFull: a turn whose append fails with a full disk, in the middle of the
// write or at its fsync, is an error (the handler answers 500) and is not recorded;
// the journal is cut back, the retried turn lands on a clean line, and reopening
// gives every acknowledged turn.
func TestJournalDiskFull(t *testing.T) {
	for _, phase := range []string{wlog.FaultWrite, wlog.FaultSync} {
		t.Run(phase, func(t *testing.T) {
			dir := t.TempDir()
			path := journalPath(dir, "s1")
			s := &session{id: "s1", version: -1}
			require.NoError(t, s.appendTurn(dir, turnN(1)))
			good, err := os.ReadFile(path)
			require.NoError(t, err)
			disarm := wlog.InjectFault(wlog.Fault{Name: "s1.jsonl", Append: 1, Phase: phase})
			err = s.appendTurn(dir, turnN(2))
			disarm()
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.Equal(t, 1, s.turns, "the failed turn is not applied")
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(good), string(b), "the failed append is cut off")
			require.NoError(t, s.appendTurn(dir, turnN(2)), "the retry")
			require.NoError(t, s.journal.Close())

			got, err := readJournal(path, "s1")
			require.NoError(t, err)
			defer got.journal.Close()
			require.Equal(t, 2, got.turns)
			require.Equal(t, []int32{0, 1, 2, 3}, got.tokens)
		})
	}
}

// TestJournalDiskFullAnswers500: through the handler, a turn whose journal append
// fails with a full disk is answered 500 and not recorded; the retry is answered, and
// a gateway started on the same journals reopens the session with exactly the
// acknowledged turns.
func TestJournalDiskFullAnswers500(t *testing.T) {
	_, srv, incoming := newTestGateway(t)
	root := filepath.Dir(incoming)
	msgs := []map[string]any{{"role": "user", "content": "count with me"}}
	v, _ := chat(t, srv.URL, "full-1", msgs, 1)
	reply := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	msgs = append(msgs, reply, map[string]any{"role": "user", "content": "go on"})

	disarm := wlog.InjectFault(wlog.Fault{Name: "full-1.jsonl", Append: 1, Phase: wlog.FaultWrite})
	body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 6, "seed": 2})
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(SessionHeader, "full-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var e map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	disarm()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, e)
	require.Contains(t, fmt.Sprint(e), "no space left on device")

	chat(t, srv.URL, "full-1", msgs, 2) // the retry
	g2, err := New(Options{Config: func() Config { c := DefaultConfig(); c.Enabled = true; return c }(),
		ModelDir: filepath.Join(root, "model"), JournalDir: filepath.Join(root, "journals"), Incoming: incoming,
		Backend: "go", Log: zerolog.Nop()})
	require.NoError(t, err)
	s := g2.sessions["full-1"]
	require.NotNil(t, s)
	defer s.journal.Close()
	require.Equal(t, 2, s.turns, "the two acknowledged turns, not the failed one")
	require.Equal(t, "go on", s.messages[2].Content)
}
