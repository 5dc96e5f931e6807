package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// SessionHeader carries a session id on requests and answers.
const SessionHeader = "X-Hindsight-Session"

// chat is POST /v1/chat/completions.
func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) {
	if n := g.pending.Add(1); n > int64(g.cfg.MaxPending) {
		g.pending.Add(-1)
		code := "too_many_requests"
		writeError(w, &apiError{status: http.StatusTooManyRequests, Message: fmt.Sprintf("%d requests pending (gateway.max_pending); retry later", g.cfg.MaxPending), Type: "rate_limit_error", Code: &code})
		return
	}
	defer g.pending.Add(-1)
	var req ChatRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, g.cfg.MaxRequestBytes))
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, &apiError{status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("request body over %d bytes (gateway.max_request_bytes)", tooBig.Limit), Type: "invalid_request_error"})
			return
		}
		writeError(w, badRequest("", "malformed JSON body: %v", err))
		return
	}
	recorded := req.Model == g.cfg.ModelName
	if !recorded && (g.cfg.UnrecordedModel == "" || req.Model != g.cfg.UnrecordedModel) {
		writeError(w, badRequest("model_not_found", "model %q does not exist; this gateway serves %q", req.Model, g.cfg.ModelName))
		return
	}
	if req.N != nil && *req.N != 1 {
		writeError(w, badRequest("", "n %d: only n = 1 is supported", *req.N))
		return
	}
	if _, err := req.stops(); err != nil {
		writeError(w, badRequest("", "%v", err))
		return
	}
	msgs, aerr := canonical(req.Messages)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	tools, aerr := toolDefs(req.Tools)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	p := g.pol.cur.Load()
	var t *turn
	var s *session
	if recorded {
		var k int
		if s, k, aerr = g.acquire(r.Header.Get(SessionHeader), msgs); aerr != nil {
			writeError(w, aerr)
			return
		}
		t, aerr = g.sampleTurn(r.Context(), p, s, &req, msgs, tools, k)
		if aerr == nil {
			if err := s.appendTurn(g.opts.JournalDir, t.rec); err != nil {
				g.log.Error().Err(err).Str("session", s.id).Msg("journal turn; not answered")
				aerr = &apiError{status: http.StatusInternalServerError, Message: "record the turn: " + err.Error(), Type: "server_error"}
			}
		}
		s.mu.Unlock()
		g.release(s)
	} else { // the unrecorded model: a session of its own, never kept
		s = &session{id: "unrecorded-" + newSessionID(), version: -1}
		t, aerr = g.sampleTurn(r.Context(), p, s, &req, msgs, tools, 0)
		if aerr == nil {
			t.rec.Turn = 1
			g.log.Debug().Str("model", req.Model).Int("prompt_tokens", t.prompt).Int("tokens", len(t.sampled)).Msg("unrecorded turn")
		}
	}
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	g.log.Debug().Str("session", s.id).Int("turn", t.rec.Turn).Int("prompt_tokens", t.prompt).Int("tokens", len(t.sampled)).Str("finish", t.finish).Msg("turn")
	if recorded {
		w.Header().Set(SessionHeader, s.id)
	}
	id := fmt.Sprintf("chatcmpl-%s-%d", s.id, t.rec.Turn)
	if req.Stream {
		g.stream(w, &req, id, t)
		return
	}
	content := t.reply.Content
	msg := &OutMessage{Role: "assistant", Content: &content, ToolCalls: t.reply.ToolCalls}
	if len(t.reply.ToolCalls) > 0 && content == "" {
		msg.Content = nil
	}
	ch := Choice{Message: msg, FinishReason: &t.finish}
	if req.Logprobs {
		ch.Logprobs = &LogprobList{Content: g.tokenLogprobs(t, 0, len(t.sampled))}
	}
	writeJSON(w, ChatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
		SystemFingerprint: fmt.Sprintf("hindsight-step-%d", t.policy.step), Choices: []Choice{ch},
		Usage: &Usage{PromptTokens: t.prompt, CompletionTokens: len(t.sampled), TotalTokens: t.prompt + len(t.sampled)}})
}

// tokenLogprobs returns the logprobs entries of sampled tokens [from, to).
func (g *Gateway) tokenLogprobs(t *turn, from, to int) []TokenLogprob {
	out := make([]TokenLogprob, 0, to-from)
	for i := from; i < to; i++ {
		text, _ := t.policy.tok.Decode(t.sampled[i : i+1])
		bs := make([]int, len(text))
		for j := range len(text) {
			bs[j] = int(text[j])
		}
		out = append(out, TokenLogprob{Token: text, Logprob: float64(t.lps[i]), Bytes: bs, TopLogprobs: []struct{}{}, TokenID: t.sampled[i]})
	}
	return out
}

// stream writes an already journaled turn as server-sent events: the role, the
// content a token at a time (with its log-probs when asked), the tool calls, the
// finish reason, the usage when asked, and [DONE]. The turn is sampled whole
// before the first event: what is streamed is on disk already.
func (g *Gateway) stream(w http.ResponseWriter, req *ChatRequest, id string, t *turn) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	created := time.Now().Unix()
	send := func(ch Choice, usage *Usage) {
		chunk := ChatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: req.Model,
			SystemFingerprint: fmt.Sprintf("hindsight-step-%d", t.policy.step), Choices: []Choice{ch}, Usage: usage}
		if usage != nil {
			chunk.Choices = []Choice{}
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if fl != nil {
			fl.Flush()
		}
	}
	empty := ""
	send(Choice{Delta: &OutMessage{Role: "assistant", Content: &empty}}, nil)
	content := t.reply.Content
	emitted, pending := 0, 0 // bytes of content sent; first token whose log-prob is not sent
	if len(t.reply.ToolCalls) == 0 {
		for i := range t.sampled {
			pre, _ := t.policy.tok.Decode(t.sampled[:i+1])
			upto := min(len(pre), len(content))
			if upto <= emitted || !strings.HasPrefix(content, pre[:upto]) || !utf8.ValidString(content[:upto]) {
				continue
			}
			piece := content[emitted:upto]
			ch := Choice{Delta: &OutMessage{Content: &piece}}
			if req.Logprobs {
				ch.Logprobs = &LogprobList{Content: g.tokenLogprobs(t, pending, i+1)}
				pending = i + 1
			}
			send(ch, nil)
			emitted = upto
		}
	}
	if emitted < len(content) || len(t.reply.ToolCalls) > 0 {
		piece := content[emitted:]
		d := &OutMessage{Content: &piece}
		for i, tc := range t.reply.ToolCalls {
			tc.Index = &i
			d.ToolCalls = append(d.ToolCalls, tc)
		}
		ch := Choice{Delta: d}
		if req.Logprobs {
			ch.Logprobs = &LogprobList{Content: g.tokenLogprobs(t, pending, len(t.sampled))}
			pending = len(t.sampled)
		}
		send(ch, nil)
	}
	ch := Choice{Delta: &OutMessage{}, FinishReason: &t.finish}
	if req.Logprobs && pending < len(t.sampled) { // the stop token
		ch.Logprobs = &LogprobList{Content: g.tokenLogprobs(t, pending, len(t.sampled))}
	}
	send(ch, nil)
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(Choice{}, &Usage{PromptTokens: t.prompt, CompletionTokens: len(t.sampled), TotalTokens: t.prompt + len(t.sampled)})
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// models is GET /v1/models: the recorded model id, then the unrecorded one.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	p := g.pol.cur.Load()
	var data []map[string]any
	for _, id := range []string{g.cfg.ModelName, g.cfg.UnrecordedModel} {
		if id != "" {
			data = append(data, map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "hindsight",
				"policy_version": p.step, "max_model_len": p.maxPos, "recorded": id == g.cfg.ModelName})
		}
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

// closeSession is POST /v1/sessions/{id}/close: the session ends now and is
// written to the spool; an optional body {"task_id", "reward"} is recorded first.
func (g *Gateway) closeSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		TaskID string   `json:"task_id"`
		Reward *float32 `json:"reward"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			writeError(w, badRequest("", "malformed JSON body: %v", err))
			return
		}
	}
	g.mu.Lock()
	s := g.sessions[id]
	switch { // s.turns is read only with s.busy == 0: no request holds s.mu then
	case s != nil && s.busy > 0:
		g.mu.Unlock()
		writeError(w, &apiError{status: http.StatusConflict, Message: fmt.Sprintf("session %q has a request in progress", id), Type: "invalid_request_error"})
		return
	case s == nil || s.turns == 0:
		g.mu.Unlock()
		writeError(w, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("no open session %q", id), Type: "invalid_request_error"})
		return
	}
	delete(g.sessions, id)
	g.ending[id] = s
	g.mu.Unlock()
	if body.TaskID != "" || body.Reward != nil {
		s.mu.Lock()
		err := s.appendTurn(g.opts.JournalDir, &turnRecord{Turn: s.turns, Messages: s.messages, TaskID: body.TaskID,
			Reward: body.Reward, PolicyVersion: max(s.version, 0), Tokenizer: s.tok})
		s.mu.Unlock()
		if err != nil {
			g.log.Error().Err(err).Str("session", id).Msg("journal close")
		}
	}
	path, err := g.end(s, "closed")
	if err != nil {
		g.log.Error().Err(err).Str("session", id).Msg("write session to the spool; its journal stays for the next start")
		writeError(w, &apiError{status: http.StatusInternalServerError, Message: err.Error(), Type: "server_error"})
		return
	}
	writeJSON(w, map[string]any{"session": id, "rollout_id": id, "file": path, "tokens": len(s.tokens), "turns": s.turns})
}
