package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/rollout"
)

// newTestGateway opens a gateway on a fresh tiny byte model, served by a real HTTP
// server.
func newTestGateway(t testing.TB) (*Gateway, *httptest.Server, string) {
	t.Helper()
	return newTestGatewayWith(t, DefaultConfig())
}

// newTestGatewayWith is newTestGateway with cfg.
func newTestGatewayWith(t testing.TB, cfg Config) (*Gateway, *httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	_, err := data.InitModel(model, data.InitOptions{Preset: "tiny", Seed: 2})
	require.NoError(t, err)
	cfg.Enabled = true
	incoming := filepath.Join(dir, "incoming")
	g, err := New(Options{Config: cfg, ModelDir: model, JournalDir: filepath.Join(dir, "journals"), Incoming: incoming,
		Backend: "go", Log: zerolog.Nop()})
	require.NoError(t, err)
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return g, srv, incoming
}

func chat(t *testing.T, url, session string, msgs []map[string]any, seed int) (map[string]any, string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 6, "seed": seed, "logprobs": true})
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	require.NoError(t, err)
	if session != "" {
		req.Header.Set(SessionHeader, session)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var v map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	require.Equal(t, 200, resp.StatusCode, v)
	return v, resp.Header.Get(SessionHeader)
}

// TestConcurrentSessions runs conversations at once, half named by the session
// header and half matched by their messages, and ends them all: each becomes one
// valid rollout holding exactly its own turns' sampled tokens. Under -race the
// only reports are inside GoMLX's pure-Go backend (simplego's parallel executor),
// none in the gateway.
func TestConcurrentSessions(t *testing.T) {
	g, srv, incoming := newTestGateway(t)
	const convs, turns = 6, 3
	want := make([][]int32, convs)
	ids := make([]string, convs)
	var wg sync.WaitGroup
	for c := range convs {
		wg.Go(func() {
			header := ""
			if c%2 == 0 {
				header = fmt.Sprintf("conv-%d", c)
			}
			msgs := []map[string]any{{"role": "user", "content": fmt.Sprintf("conversation %d", c)}}
			for turn := range turns {
				v, sid := chat(t, srv.URL, header, msgs, turn)
				if ids[c] == "" {
					ids[c] = sid
				}
				require.Equal(t, ids[c], sid, "conversation %d turn %d stays in its session", c, turn)
				ch := v["choices"].([]any)[0].(map[string]any)
				for _, e := range ch["logprobs"].(map[string]any)["content"].([]any) {
					want[c] = append(want[c], int32(e.(map[string]any)["token_id"].(float64)))
				}
				msgs = append(msgs, ch["message"].(map[string]any), map[string]any{"role": "user", "content": "more"})
			}
		})
	}
	wg.Wait()
	require.NoError(t, g.endAll())
	files, err := filepath.Glob(filepath.Join(incoming, "*.arrow"))
	require.NoError(t, err)
	require.Len(t, files, convs)
	for c, id := range ids {
		r, err := rollout.OpenReader(filepath.Join(incoming, "gateway-"+id+".arrow"), rollout.ReadOptions{})
		require.NoError(t, err)
		require.True(t, r.Next())
		require.Empty(t, r.Problems())
		ro := r.Rollout()
		var got []int32
		for i, tok := range ro.Tokens {
			if _, ok := ro.LogProb(i); ok {
				got = append(got, tok)
			}
		}
		require.Equal(t, want[c], got, "conversation %d", c)
		require.Len(t, ro.Segments, 2*turns)
		require.NoError(t, r.Close())
	}
	entries, err := os.ReadDir(g.opts.JournalDir)
	require.NoError(t, err)
	require.Empty(t, entries, "every journal is removed once its session is written")
}

// TestSessionMatching: a follow-up that extends a conversation continues its
// session; one that edits the history starts a new session (never a rollout
// whose earlier tokens differ from its messages); a session header whose
// conversation the messages do not extend is refused.
func TestSessionMatching(t *testing.T) {
	g, srv, _ := newTestGateway(t)
	first := []map[string]any{{"role": "user", "content": "one"}}
	v, sid := chat(t, srv.URL, "", first, 1)
	reply := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)

	_, same := chat(t, srv.URL, "", append(first, reply, map[string]any{"role": "user", "content": "two"}), 2)
	require.Equal(t, sid, same)

	edited := []map[string]any{{"role": "user", "content": "ONE"}, reply, {"role": "user", "content": "two"}}
	_, other := chat(t, srv.URL, "", edited, 3)
	require.NotEqual(t, sid, other)

	_, h := chat(t, srv.URL, "named", first, 4)
	require.Equal(t, "named", h)
	body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": edited, "max_tokens": 4})
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(SessionHeader, "named")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var e struct{ Error apiError }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "session_mismatch", *e.Error.Code)

	g.mu.Lock()
	defer g.mu.Unlock()
	require.Len(t, g.sessions, 3)
	require.Equal(t, 2, g.sessions[sid].turns)
}

// postJSON sends body to url under session (may be "") and returns the status and the
// decoded answer.
func postJSON(t *testing.T, url, session, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	if session != "" {
		req.Header.Set(SessionHeader, session)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var v map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
	return resp.StatusCode, v
}

// TestIdleSessionIDNotReused: a header-named session that ended idle is held for
// the feedback window, then written to the spool; a request under its id, in the
// window or after, is refused (409 session_closed) instead of starting a second
// rollout with the same id.
func TestIdleSessionIDNotReused(t *testing.T) {
	g, srv, incoming := newTestGateway(t)
	msgs := []map[string]any{{"role": "user", "content": "hi"}}
	v, _ := chat(t, srv.URL, "idle-1", msgs, 1)
	msgs = append(msgs, v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any), map[string]any{"role": "user", "content": "more"})
	body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 4})
	idle := time.Now().Add(2 * g.cfg.IdleTimeout)
	g.endIdle(idle) // ended: held for the feedback window
	require.NoFileExists(t, filepath.Join(incoming, "gateway-idle-1.arrow"))
	require.EqualValues(t, 1, g.Stats().HeldSessions)
	status, v := postJSON(t, srv.URL+"/v1/chat/completions", "idle-1", string(body))
	require.Equal(t, http.StatusConflict, status, v)
	require.Equal(t, "session_closed", v["error"].(map[string]any)["code"])

	g.endIdle(idle.Add(g.cfg.FeedbackWindow)) // the window is over: written
	require.FileExists(t, filepath.Join(incoming, "gateway-idle-1.arrow"))
	status, v = postJSON(t, srv.URL+"/v1/chat/completions", "idle-1", string(body))
	require.Equal(t, http.StatusConflict, status, v)
	require.Equal(t, "session_closed", v["error"].(map[string]any)["code"])
	st := g.Stats()
	require.Zero(t, st.OpenSessions)
	require.Zero(t, st.HeldSessions)
	require.EqualValues(t, 1, st.RolloutsRecorded)
}

// TestFeedbackWindow: a closed session is held for the feedback window; a rating
// and a comment in the window are journaled with it; a restart holds it for the
// rest of its window; when the window is over it is written with both. Over
// feedback_window_max_bytes a held session is written at once.
func TestFeedbackWindow(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	_, err := data.InitModel(model, data.InitOptions{Preset: "tiny", Seed: 2})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Enabled = true
	incoming := filepath.Join(dir, "incoming")
	open := func(cfg Config) (*Gateway, *httptest.Server) {
		g, err := New(Options{Config: cfg, ModelDir: model, JournalDir: filepath.Join(dir, "journals"), Incoming: incoming,
			Backend: "go", Log: zerolog.Nop()})
		require.NoError(t, err)
		srv := httptest.NewServer(g.Handler())
		t.Cleanup(srv.Close)
		return g, srv
	}
	_, srv := open(cfg)
	chat(t, srv.URL, "w-1", []map[string]any{{"role": "user", "content": "hi"}}, 1)
	status, v := postJSON(t, srv.URL+"/v1/sessions/w-1/close", "", `{"reward": 0.5}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, false, v["written"])
	status, v = postJSON(t, srv.URL+"/v1/feedback", "", `{"session_id":"w-1","rating":-1,"comment":"say hello back"}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, true, v["held"])
	require.Equal(t, false, v["late"])
	require.NoFileExists(t, filepath.Join(incoming, "gateway-w-1.arrow"))

	g2, _ := open(cfg) // a restart: the journal says the session is closed
	st := g2.Stats()
	require.EqualValues(t, 1, st.HeldSessions)
	require.Zero(t, st.OpenSessions)
	g2.mu.Lock()
	closed := g2.held["w-1"].closedAt
	g2.mu.Unlock()
	g2.endIdle(closed.Add(cfg.FeedbackWindow - time.Second))
	require.NoFileExists(t, filepath.Join(incoming, "gateway-w-1.arrow"), "inside the window")
	g2.endIdle(closed.Add(cfg.FeedbackWindow))
	r, err := rollout.OpenReader(filepath.Join(incoming, "gateway-w-1.arrow"), rollout.ReadOptions{})
	require.NoError(t, err)
	require.True(t, r.Next())
	ro := r.Rollout()
	require.True(t, ro.HasFeedback)
	require.EqualValues(t, -1, ro.Feedback)
	require.Equal(t, float32(0.5), ro.Reward)
	require.Equal(t, "say hello back", ro.Segments[len(ro.Segments)-1].Feedback)
	require.NoError(t, r.Close())

	// The bound: one byte of held journals at most writes a closed session at once.
	small := cfg
	small.FeedbackWindowMaxBytes = 1
	g3, srv3 := open(small)
	chat(t, srv3.URL, "w-2", []map[string]any{{"role": "user", "content": "hi"}}, 1)
	status, v = postJSON(t, srv3.URL+"/v1/sessions/w-2/close", "", "")
	require.Equal(t, 200, status, v)
	require.FileExists(t, filepath.Join(incoming, "gateway-w-2.arrow"))
	st = g3.Stats()
	require.EqualValues(t, 1, st.HeldEarly)
	require.Zero(t, st.HeldSessions)
}
