// Command fakellm is a tiny OpenAI chat-completions server for the teacher tests. It
// listens on -addr (default 127.0.0.1:0), prints "ADDR host:port" on stdout once it
// accepts connections, and serves POST /v1/chat/completions with a behaviour chosen
// by the request's model name:
//
//	ok         a fixed hint
//	echo:TEXT  TEXT as the hint
//	slow       no answer for 30 s (or until the client goes away)
//	429        HTTP 429 with Retry-After: 1
//	500        HTTP 500
//	badjson    HTTP 200 with a truncated JSON body
//	empty      a completion with empty content
//	long       a 3000-word completion with finish_reason "stop"
//	reset      the connection is closed with a TCP RST, no response
//	leak       a hint that pastes the prompt's "WHAT HAPPENED NEXT" section
//
// MODE*N behaves as MODE for the first N requests of that model name, then as ok. A
// suffix "#anything" is ignored, so tests can keep separate counts per model name.
// GET /stats returns, per model name, the request count, the arrival times (Unix
// nanoseconds) and the last Authorization header; POST /reset clears them.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

const okHint = "Locate the file with `search_code` before reading it instead of guessing the path."

type stats struct {
	Count int     `json:"count"`
	Times []int64 `json:"times"`
	Auth  string  `json:"auth"` // the last Authorization header
}

type server struct {
	mu    sync.Mutex
	stats map[string]*stats
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
	s := &server{stats: map[string]*stats{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.complete)
	mux.HandleFunc("GET /stats", s.getStats)
	mux.HandleFunc("POST /reset", s.reset)
	fmt.Printf("ADDR %s\n", ln.Addr())
	if err := http.Serve(ln, mux); err != nil {
		fmt.Fprintln(os.Stderr, "fakellm:", err)
		os.Exit(1)
	}
}

type request struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
	MaxTokens int `json:"max_tokens"`
}

func (s *server) complete(w http.ResponseWriter, r *http.Request) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	mode, _, _ := strings.Cut(req.Model, "#")
	s.mu.Lock()
	st := s.stats[req.Model]
	if st == nil {
		st = &stats{}
		s.stats[req.Model] = st
	}
	st.Count++
	st.Times = append(st.Times, time.Now().UnixNano())
	st.Auth = r.Header.Get("Authorization")
	n := st.Count
	s.mu.Unlock()
	if m, limit, ok := strings.Cut(mode, "*"); ok {
		mode = m
		if k, err := strconv.Atoi(limit); err == nil && n > k {
			mode = "ok"
		}
	}
	switch {
	case mode == "ok":
		reply(w, okHint, "stop")
	case strings.HasPrefix(mode, "echo:"):
		reply(w, strings.TrimPrefix(mode, "echo:"), "stop")
	case mode == "slow":
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
		reply(w, okHint, "stop")
	case mode == "429":
		w.Header().Set("Retry-After", "1")
		apiError(w, http.StatusTooManyRequests, "rate limited")
	case mode == "500":
		apiError(w, http.StatusInternalServerError, "internal error")
	case mode == "badjson":
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assi`))
	case mode == "empty":
		reply(w, "", "stop")
	case mode == "long":
		reply(w, strings.Repeat("word ", 3000), "stop")
	case mode == "reset":
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // close with RST
		}
		conn.Close()
	case mode == "leak":
		prompt := ""
		if len(req.Messages) > 0 {
			prompt = req.Messages[len(req.Messages)-1].Content
		}
		_, after, _ := strings.Cut(prompt, "WHAT HAPPENED NEXT (for you only; never quote it):\n")
		reply(w, "Expect this output: "+strings.TrimSpace(after), "stop")
	default:
		apiError(w, http.StatusNotFound, "unknown model "+req.Model)
	}
}

func reply(w http.ResponseWriter, content, finish string) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"id":      "chatcmpl-fake",
		"object":  "chat.completion",
		"created": time.Now().Unix(),
		"model":   "fake",
		"choices": []map[string]any{{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": content},
			"finish_reason": finish,
		}},
		"usage": map[string]int{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
	})
}

func apiError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": "server_error"}})
}

func (s *server) getStats(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.stats)
}

func (s *server) reset(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	s.stats = map[string]*stats{}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}
