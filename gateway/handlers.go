package gateway

import (
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/hindsight-ai/hindsight/xla"
)

// SessionHeader carries a session id on requests and answers.
const SessionHeader = "X-Hindsight-Session"

// chat is POST /v1/chat/completions.
func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) {
	t0 := time.Now()
	if n := g.pending.Add(1); n > int64(g.cfg.MaxPending) {
		g.pending.Add(-1)
		code := "too_many_requests"
		writeError(w, &apiError{status: http.StatusTooManyRequests, Message: fmt.Sprintf("%d requests pending (gateway.max_pending); retry later", g.cfg.MaxPending), Type: "rate_limit_error", Code: &code})
		return
	}
	defer g.pending.Add(-1)
	var req ChatRequest
	if aerr := decodeBody(w, r, g.cfg.MaxRequestBytes, "gateway.max_request_bytes", &req, false); aerr != nil {
		writeError(w, aerr)
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
	if aerr := req.checkFields(); aerr != nil {
		writeError(w, aerr)
		return
	}
	if v, ok := req.Metadata["reward"]; ok {
		if _, aerr := parseReward("metadata.reward", v); aerr != nil {
			writeError(w, aerr)
			return
		}
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
	var st *streamer // with stream: true, sends the reply as it is sampled
	var onToken func(int32, float32, []xla.TokenLogProb)
	openStream := func(turnNo int) {
		if req.Stream {
			st = g.newStreamer(w, &req, fmt.Sprintf("chatcmpl-%s-%d", s.id, turnNo), p)
			onToken = st.token
		}
	}
	if recorded {
		var k int
		if s, k, aerr = g.acquire(r.Header.Get(SessionHeader), msgs); aerr != nil {
			writeError(w, aerr)
			return
		}
		w.Header().Set(SessionHeader, s.id) // before a streamed byte
		if p, aerr = g.policyFor(s); aerr == nil {
			openStream(s.turns + 1)
			t, aerr = g.sampleTurn(r.Context(), p, s, &req, msgs, tools, k, onToken)
		}
		if aerr == nil {
			took := time.Since(t0).Seconds()
			g.abTurn(s, t.rec, took)
			if err := s.appendTurn(g.opts.JournalDir, t.rec); err != nil {
				g.log.Error().Err(err).Str("session", s.id).Msg("journal turn; not answered")
				aerr = &apiError{status: http.StatusInternalServerError, Message: "record the turn: " + err.Error(), Type: "server_error"}
			} else {
				g.abAnswered(s, took)
			}
		}
		s.mu.Unlock()
		g.release(s)
	} else { // the unrecorded model: a session of its own, never kept
		s = &session{id: "unrecorded-" + newSessionID(), version: -1}
		openStream(1)
		t, aerr = g.sampleTurn(r.Context(), p, s, &req, msgs, tools, 0, onToken)
		if aerr == nil {
			t.rec.Turn = 1
			g.log.Debug().Str("model", req.Model).Int("prompt_tokens", t.prompt).Int("tokens", len(t.sampled)).Msg("unrecorded turn")
		}
	}
	if aerr != nil {
		if st != nil && st.started {
			g.errors.Add(1) // answered 200 already: the error is in the stream
		}
		if st != nil {
			st.fail(aerr)
			return
		}
		writeError(w, aerr)
		return
	}
	g.turns.Add(1)
	g.log.Debug().Str("session", s.id).Int("turn", t.rec.Turn).Int("prompt_tokens", t.prompt).Int("tokens", len(t.sampled)).Str("finish", t.finish).Msg("turn")
	if st != nil {
		st.finish(t)
		return
	}
	id := fmt.Sprintf("chatcmpl-%s-%d", s.id, t.rec.Turn)
	content := t.reply.Content
	msg := &OutMessage{Role: "assistant", Content: &content, ToolCalls: t.reply.ToolCalls}
	if len(t.reply.ToolCalls) > 0 && content == "" {
		msg.Content = nil
	}
	ch := Choice{Message: msg, FinishReason: &t.finish}
	if req.Logprobs {
		ch.Logprobs = &LogprobList{Content: tokenLogprobs(t.policy, t.sampled, t.lps, t.top, 0, len(t.sampled))}
	}
	writeJSON(w, ChatResponse{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
		SystemFingerprint: fmt.Sprintf("hindsight-step-%d", t.policy.step), Choices: []Choice{ch},
		Usage: &Usage{PromptTokens: t.prompt, CompletionTokens: len(t.sampled), TotalTokens: t.prompt + len(t.sampled)}})
}

// tokenLogprobs returns the logprobs entries of sampled tokens [from, to), with
// top[i]'s alternatives (top may be shorter: none).
func tokenLogprobs(p *policy, toks []int32, lps []float32, top [][]xla.TokenLogProb, from, to int) []TokenLogprob {
	out := make([]TokenLogprob, 0, to-from)
	for i := from; i < to; i++ {
		text, bs := tokenText(p, toks[i])
		e := TokenLogprob{Token: text, Logprob: float64(lps[i]), Bytes: bs, TopLogprobs: []TopLogprob{}, TokenID: toks[i]}
		if i < len(top) {
			for _, a := range top[i] {
				text, bs := tokenText(p, a.Token)
				e.TopLogprobs = append(e.TopLogprobs, TopLogprob{Token: text, Logprob: float64(a.LogProb), Bytes: bs, TokenID: a.Token})
			}
		}
		out = append(out, e)
	}
	return out
}

// tokenText is a token's text and its bytes.
func tokenText(p *policy, tok int32) (string, []int) {
	text, _ := p.tok.Decode([]int32{tok})
	bs := make([]int, len(text))
	for j := range len(text) {
		bs[j] = int(text[j])
	}
	return text, bs
}

// models is GET /v1/models: the recorded model id, then the unrecorded one.
func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	var data []map[string]any
	for _, id := range []string{g.cfg.ModelName, g.cfg.UnrecordedModel} {
		if id != "" {
			data = append(data, g.modelObject(id))
		}
	}
	writeJSON(w, map[string]any{"object": "list", "data": data})
}

// model is GET /v1/models/{id}: one of models' objects, or 404 model_not_found.
func (g *Gateway) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == "" || (id != g.cfg.ModelName && id != g.cfg.UnrecordedModel) {
		code := "model_not_found"
		writeError(w, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("model %q does not exist; this gateway serves %q", id, g.cfg.ModelName),
			Type: "invalid_request_error", Code: &code})
		return
	}
	writeJSON(w, g.modelObject(id))
}

// modelObject is model id as /v1/models lists it: max_model_len is the context
// served (gateway.max_context_tokens within the model's max_position_embeddings),
// the longest conversation a request may reach, reply included.
func (g *Gateway) modelObject(id string) map[string]any {
	p := g.pol.cur.Load()
	return map[string]any{"id": id, "object": "model", "created": 0, "owned_by": "hindsight",
		"policy_version": p.step, "max_model_len": p.maxPos, "max_position_embeddings": p.modelMax, "recorded": id == g.cfg.ModelName}
}

// closeSession is POST /v1/sessions/{id}/close: the session ends now and is
// written to the spool; an optional body {"task_id", "reward"} is recorded first.
func (g *Gateway) closeSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var body struct {
		TaskID string   `json:"task_id"`
		Reward *float32 `json:"reward"`
	}
	if aerr := decodeBody(w, r, 1<<20, "the close body limit, 1 MiB", &body, true); aerr != nil {
		writeError(w, aerr)
		return
	}
	now := time.Now()
	g.mu.Lock()
	s := g.sessions[id]
	switch { // s.turns is read only with s.busy == 0: no request holds s.mu then
	case s != nil && s.busy > 0:
		g.mu.Unlock()
		writeError(w, &apiError{status: http.StatusConflict, Message: fmt.Sprintf("session %q has a request in progress", id), Type: "invalid_request_error"})
		return
	case s == nil && (g.held[id] != nil || g.ending[id] != nil || g.late.Has(id)):
		g.mu.Unlock()
		code := "session_closed"
		writeError(w, &apiError{status: http.StatusConflict, Message: fmt.Sprintf("session %q is closed already", id), Type: "invalid_request_error", Code: &code})
		return
	case s == nil || s.turns == 0:
		g.mu.Unlock()
		writeError(w, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("no open session %q", id), Type: "invalid_request_error"})
		return
	}
	delete(g.sessions, id)
	g.abOutcome(id, body.Reward)
	if g.cfg.FeedbackWindow > 0 {
		// Held for the feedback window: journaled as closed, written when it is over.
		s.closedAt = now
		g.held[id] = s
		g.mu.Unlock()
		g.markClosed(s, now, body.TaskID, body.Reward)
		g.log.Info().Str("session", id).Int("turns", s.turns).Dur("feedback_window", g.cfg.FeedbackWindow).Msg("session closed; held for feedback")
		until := g.windowEnd(s)
		g.trimHeld()
		writeJSON(w, map[string]any{"session": id, "rollout_id": id, "file": filepath.Join(g.opts.Incoming, s.fileName()),
			"tokens": len(s.tokens), "turns": s.turns, "written": false, "feedback_until": until.UTC().Format(time.RFC3339Nano)})
		return
	}
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
	writeJSON(w, map[string]any{"session": id, "rollout_id": id, "file": path, "tokens": len(s.tokens), "turns": s.turns, "written": true})
}
