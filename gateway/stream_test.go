package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// streamed is what a client assembles from a streamed answer.
type streamed struct {
	content  string
	ids      []int32
	finish   string
	calls    int
	contents int // content chunks before the finish chunk
	errMsg   string
}

// readStream parses server-sent events as the openai clients do.
func readStream(t *testing.T, body []byte) streamed {
	t.Helper()
	var out streamed
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string           `json:"content"`
					ToolCalls []json.RawMessage `json:"tool_calls"`
				} `json:"delta"`
				Logprobs *struct {
					Content []struct {
						TokenID int32 `json:"token_id"`
					} `json:"content"`
				} `json:"logprobs"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Error *apiError `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(data), &chunk), data)
		if chunk.Error != nil {
			out.errMsg = chunk.Error.Message
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				out.content += *c.Delta.Content
				if out.finish == "" {
					out.contents++
				}
			}
			out.calls += len(c.Delta.ToolCalls)
			if c.Logprobs != nil {
				for _, e := range c.Logprobs.Content {
					out.ids = append(out.ids, e.TokenID)
				}
			}
			if c.FinishReason != nil {
				out.finish = *c.FinishReason
			}
		}
	}
	return out
}

// TestStreamEqualsWhole: for many seeds, with and without stop strings and tools,
// the streamed answer (content, token ids, finish reason) is exactly the
// non-streamed answer of the same request, and a multi-token reply comes in more
// than one content chunk.
func TestStreamEqualsWhole(t *testing.T) {
	_, srv, _ := newTestGateway(t)
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "ls", "parameters": map[string]any{"type": "object"}}}}
	chunked := 0
	for _, tc := range []struct {
		name  string
		extra map[string]any
	}{
		{"plain", nil},
		{"stop", map[string]any{"stop": []string{"a", "e ", "\n"}}},
		{"tools", map[string]any{"tools": tools}},
		{"stop+tools", map[string]any{"tools": tools, "stop": "t"}},
	} {
		for seed := range 6 {
			req := map[string]any{"model": "policy", "messages": []map[string]any{{"role": "user", "content": "hi"}},
				"max_tokens": 24, "seed": seed, "logprobs": true}
			for k, v := range tc.extra {
				req[k] = v
			}
			whole := post(t, srv.URL, req)
			req["stream"] = true
			got := readStream(t, post(t, srv.URL, req))
			var w struct {
				Choices []struct {
					Message struct {
						Content   *string           `json:"content"`
						ToolCalls []json.RawMessage `json:"tool_calls"`
					} `json:"message"`
					Logprobs struct {
						Content []struct {
							TokenID int32 `json:"token_id"`
						} `json:"content"`
					} `json:"logprobs"`
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
			}
			require.NoError(t, json.Unmarshal(whole, &w), string(whole))
			ch := w.Choices[0]
			var ids []int32
			for _, e := range ch.Logprobs.Content {
				ids = append(ids, e.TokenID)
			}
			content := ""
			if ch.Message.Content != nil {
				content = *ch.Message.Content
			}
			name := fmt.Sprintf("%s seed %d", tc.name, seed)
			require.Empty(t, got.errMsg, name)
			require.Equal(t, content, got.content, name)
			require.Equal(t, ids, got.ids, name)
			require.Equal(t, ch.FinishReason, got.finish, name)
			require.Equal(t, len(ch.Message.ToolCalls), got.calls, name)
			if got.contents > 1 {
				chunked++
			}
		}
	}
	require.Positive(t, chunked, "some replies come a piece at a time")
}

func post(t *testing.T, url string, req map[string]any) []byte {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := http.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, b.String())
	return b.Bytes()
}

// journalWatch is a ResponseWriter that notes, at each streamed chunk, whether the
// session's journal holds the turn yet.
type journalWatch struct {
	*httptest.ResponseRecorder
	journal string
	seen    []string // "content:<journaled>" / "finish:<journaled>"
}

func (j *journalWatch) Write(b []byte) (int, error) {
	_, err := os.Stat(j.journal)
	journaled := err == nil
	s := string(b)
	switch {
	case strings.Contains(s, `"finish_reason":"`):
		j.seen = append(j.seen, fmt.Sprintf("finish:%v", journaled))
	case strings.Contains(s, `"content":"`) && !strings.Contains(s, `"role":"assistant"`):
		j.seen = append(j.seen, fmt.Sprintf("content:%v", journaled))
	}
	return j.ResponseRecorder.Write(b)
}

func (j *journalWatch) Flush() {}

// TestStreamTokensBeforeJournal: content goes out while the turn is being sampled
// (before its journal line exists), and the finish reason only once the turn is
// journaled.
func TestStreamTokensBeforeJournal(t *testing.T) {
	g, _, _ := newTestGateway(t)
	w := &journalWatch{ResponseRecorder: httptest.NewRecorder(), journal: journalPath(g.opts.JournalDir, "watch-1")}
	body := `{"model":"hindsight","messages":[{"role":"user","content":"hi"}],"max_tokens":24,"seed":3,"stream":true}`
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set(SessionHeader, "watch-1")
	g.Handler().ServeHTTP(w, r)
	require.Equal(t, 200, w.Code)
	require.NotEmpty(t, w.seen)
	require.Equal(t, "content:false", w.seen[0], "the first content before the turn is journaled: %v", w.seen)
	require.Equal(t, "finish:true", w.seen[len(w.seen)-1], "the finish reason after: %v", w.seen)
	require.Equal(t, "watch-1", w.Header().Get(SessionHeader))
}

// BenchmarkStreamFirstContent measures, in one run, a streamed turn's time to its
// first content chunk against its time to the finish chunk, which is when the
// first content came before streaming went token by token (the turn was sampled
// and journaled whole first): first_content/finish is the ratio.
//
//	go test ./gateway -run '^$' -bench StreamFirstContent -benchtime 20x
func BenchmarkStreamFirstContent(b *testing.B) {
	_, srv, _ := newTestGateway(b)
	var first, finish time.Duration
	for i := 0; b.Loop(); i++ {
		body, _ := json.Marshal(map[string]any{"model": "policy", "messages": []map[string]any{{"role": "user", "content": "Tell me a story."}},
			"max_tokens": 64, "seed": i, "stream": true})
		start := time.Now()
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		gotFirst := false
		for sc.Scan() {
			line := sc.Text()
			if !gotFirst && strings.Contains(line, `"content":"`) && !strings.Contains(line, `"role"`) {
				first += time.Since(start)
				gotFirst = true
			}
			if strings.Contains(line, `"finish_reason":"`) {
				if !gotFirst { // no live content: it came with the finish
					first += time.Since(start)
				}
				finish += time.Since(start)
			}
		}
		resp.Body.Close()
	}
	n := float64(b.N)
	b.ReportMetric(float64(first.Milliseconds())/n, "first_content_ms")
	b.ReportMetric(float64(finish.Milliseconds())/n, "finish_ms")
	b.ReportMetric(first.Seconds()/finish.Seconds(), "first/finish")
}
