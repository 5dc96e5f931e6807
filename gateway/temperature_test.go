package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/rollout"
)

// TestSessionTemperature: a session's rollout records the sampling temperature its
// turns share (0 for greedy turns), and none (scored at 1) when its turns differ or
// one comes from a journal line written before turns recorded it.
func TestSessionTemperature(t *testing.T) {
	turn := func(n int, temp *float64) *turnRecord {
		return &turnRecord{Turn: n, Tokens: []int32{1, 2}, LogProbs: []*float32{nil, new(float32)},
			Segments: []segRecord{{Start: int32(2 * (n - 1)), End: int32(2 * n), Kind: "assistant"}}}
	}
	at := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name  string
		temps []*float64
		want  float32
		has   bool
	}{
		{"one temperature", []*float64{at(0.5), at(0.5)}, 0.5, true},
		{"greedy", []*float64{at(0)}, 0, true},
		{"default", []*float64{at(1)}, 1, true},
		{"turns differ", []*float64{at(0.5), at(1)}, 0, false},
		{"an older journal line", []*float64{at(0.5), nil}, 0, false},
	} {
		s := &session{id: "s", version: -1}
		for i, tp := range tc.temps {
			rec := turn(i+1, tp)
			rec.Temperature = tp
			s.apply(rec)
		}
		// A feedback line (no tokens) leaves it as it is.
		s.apply(&turnRecord{Turn: len(tc.temps), Comment: "ok", CommentTurn: 1})
		r := s.rollout()
		require.Equal(t, tc.has, r.HasTemperature, tc.name)
		require.Equal(t, tc.want, r.Temperature, tc.name)
	}
}

// TestTurnTemperature: through the real server, each session's rollout records the
// temperature its requests asked for: OpenAI's default 1 when they name none, 0.5
// as asked, 0 for greedy (temperature 0, or top_k 1 at any temperature), and none
// when its turns were sampled at different temperatures.
func TestTurnTemperature(t *testing.T) {
	g, srv, incoming := newTestGateway(t)
	post := func(session string, extra map[string]any) {
		body := map[string]any{"model": "hindsight", "max_tokens": 4, "seed": 3,
			"messages": []map[string]any{{"role": "user", "content": "hi " + session}}}
		for k, v := range extra {
			body[k] = v
		}
		b, _ := json.Marshal(body)
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(b))
		require.NoError(t, err)
		req.Header.Set(SessionHeader, session)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, v)
		if session == "t-mixed" { // a second turn, at another temperature
			msgs := body["messages"].([]map[string]any)
			ch := v["choices"].([]any)[0].(map[string]any)
			body["messages"] = append(msgs, ch["message"].(map[string]any), map[string]any{"role": "user", "content": "more"})
			body["temperature"] = 0.9
			b, _ := json.Marshal(body)
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/v1/chat/completions", bytes.NewReader(b))
			require.NoError(t, err)
			req.Header.Set(SessionHeader, session)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
		}
	}
	type want struct {
		T   float32
		Has bool
	}
	cases := map[string]struct {
		extra map[string]any
		want  want
	}{
		"t-default": {nil, want{1, true}},
		"t-05":      {map[string]any{"temperature": 0.5}, want{0.5, true}},
		"t-greedy":  {map[string]any{"temperature": 0}, want{0, true}},
		"t-topk1":   {map[string]any{"temperature": 1.3, "top_k": 1}, want{0, true}},
		"t-mixed":   {map[string]any{"temperature": 0.5}, want{0, false}},
	}
	for id, c := range cases {
		post(id, c.extra)
	}
	require.NoError(t, g.endAll())
	for id, c := range cases {
		r, err := rollout.OpenReader(filepath.Join(incoming, "gateway-"+id+".arrow"), rollout.ReadOptions{})
		require.NoError(t, err)
		require.True(t, r.Next())
		require.Empty(t, r.Problems())
		ro := r.Rollout()
		require.Equal(t, c.want, want{ro.Temperature, ro.HasTemperature}, id)
		require.NoError(t, r.Close())
	}
}
