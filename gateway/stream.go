package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/xla"
)

// toolCallTag opens a Hermes/Qwen tool call: with tools, the stream's live content
// stops before it (the calls are sent once parsed).
const toolCallTag = "<tool_call>"

// streamer writes one turn as server-sent events while it is sampled: the role
// first, then content as the sampler's per-token callback brings it, holding back
// only what may still change (a possible start of a stop string or of a tool call,
// an incomplete UTF-8 character, trailing white space before a tool call).
// A piece that is not a prefix of the final content cannot be sent back; finish logs
// it (it would be a tokenizer whose decoding changes earlier text). Once the
// turn is sampled and journaled, finish sends the rest of the content, the tool
// calls, the finish reason (the turn is acknowledged only then), the usage and
// [DONE]. Every piece sent is a prefix of the turn's final content, so a client
// that concatenates the deltas gets exactly the recorded message.
type streamer struct {
	w           http.ResponseWriter
	fl          http.Flusher
	req         *ChatRequest
	id          string
	fingerprint string
	created     int64
	p           *policy
	log         zerolog.Logger
	stops       []string // the request's stop strings
	tools       bool     // the request has tools: a tool call may follow

	started bool    // the role chunk (and the 200 header) is out
	toks    []int32 // sampled so far
	lps     []float32
	top     [][]xla.TokenLogProb // with top_logprobs
	body    []int32              // sampled so far without turn-end tokens: the content's tokens
	sent    string               // content sent
	lpSent  int                  // tokens whose log-probs were sent
	done    bool                 // no more live content: a stop string or a tool call began
	// firstContent is when the first content chunk was written (zero: none yet).
	firstContent time.Time
}

func (g *Gateway) newStreamer(w http.ResponseWriter, req *ChatRequest, id string, p *policy) *streamer {
	fl, _ := w.(http.Flusher)
	stops, _ := req.stops()
	return &streamer{w: w, fl: fl, req: req, id: id, fingerprint: fmt.Sprintf("hindsight-step-%d", p.step),
		created: time.Now().Unix(), p: p, log: g.log, stops: stops, tools: req.toolCalls()}
}

// send writes one chunk (a usage chunk when usage is set).
func (st *streamer) send(ch Choice, usage *Usage) {
	if !st.started {
		st.start()
	}
	chunk := ChatResponse{ID: st.id, Object: "chat.completion.chunk", Created: st.created, Model: st.req.Model,
		SystemFingerprint: st.fingerprint, Choices: []Choice{ch}, Usage: usage}
	if usage != nil {
		chunk.Choices = []Choice{}
	}
	b, _ := json.Marshal(chunk)
	fmt.Fprintf(st.w, "data: %s\n\n", b)
	if st.fl != nil {
		st.fl.Flush()
	}
}

// start writes the event-stream header and the role chunk.
func (st *streamer) start() {
	st.started = true
	st.w.Header().Set("Content-Type", "text/event-stream")
	st.w.Header().Set("Cache-Control", "no-cache")
	empty := ""
	st.send(Choice{Delta: &OutMessage{Role: "assistant", Content: &empty}}, nil)
}

// token is the sampler's callback: it sends the content that tok settles.
func (st *streamer) token(tok int32, lp float32, top []xla.TokenLogProb) {
	st.toks, st.lps = append(st.toks, tok), append(st.lps, lp)
	if top != nil {
		st.top = append(st.top, top)
	}
	if st.done || slices.Contains(st.p.stops, tok) || slices.Contains(st.req.StopTokenIDs, tok) {
		return
	}
	st.body = append(st.body, tok)
	text, err := st.p.tok.Decode(st.body)
	if err != nil || !strings.HasPrefix(text, st.sent) {
		return
	}
	limit := len(text)
	for _, s := range st.stops {
		if s == "" {
			continue
		}
		if i := strings.Index(text, s); i >= 0 {
			limit, st.done = min(limit, i), true
		}
	}
	if !st.done {
		for _, s := range st.stops {
			limit = min(limit, len(text)-partialSuffix(text, s))
		}
	}
	if st.tools {
		// With a parsed call the content is the text around the calls, trimmed;
		// without, the text as sampled. They agree on a text that starts with
		// neither white space nor a call, and up to its last non-space character
		// before the first call: beyond that, wait for the whole turn.
		if text != "" && (unicode.IsSpace(rune(text[0])) || strings.HasPrefix(text, toolCallTag)) {
			st.done = true
			return
		}
		if i := strings.Index(text, toolCallTag); i >= 0 {
			limit, st.done = min(limit, i), true
		} else {
			limit = min(limit, len(text)-partialSuffix(text, toolCallTag))
		}
		limit = len(strings.TrimRightFunc(text[:limit], unicode.IsSpace))
	}
	// A replacement character at the end may be the start of a character the next
	// token completes (the tokenizers decode an incomplete sequence as U+FFFD).
	limit = min(limit, len(strings.TrimRight(text, "\uFFFD")))
	for limit > len(st.sent) && !utf8.ValidString(text[len(st.sent):limit]) {
		limit--
	}
	if limit <= len(st.sent) {
		return
	}
	piece := text[len(st.sent):limit]
	ch := Choice{Delta: &OutMessage{Content: &piece}}
	if st.req.Logprobs {
		ch.Logprobs = &LogprobList{Content: tokenLogprobs(st.p, st.toks, st.lps, st.top, st.lpSent, len(st.toks))}
		st.lpSent = len(st.toks)
	}
	st.send(ch, nil)
	st.sent = text[:limit]
	if st.firstContent.IsZero() {
		st.firstContent = time.Now()
	}
}

// partialSuffix returns the length of the longest proper prefix of s that text
// ends with: content that may be the start of s.
func partialSuffix(text, s string) int {
	for k := min(len(s)-1, len(text)); k > 0; k-- {
		if strings.HasSuffix(text, s[:k]) {
			return k
		}
	}
	return 0
}

// finish sends what is left of a sampled and journaled turn: the rest of the
// content with the tool calls, the finish reason, the usage when asked, and [DONE].
func (st *streamer) finish(t *turn) {
	if !st.started {
		st.start()
	}
	content := t.reply.Content
	rest, ok := strings.CutPrefix(content, st.sent)
	if !ok {
		st.log.Warn().Str("completion_id", st.id).Int("sent_bytes", len(st.sent)).Int("content_bytes", len(content)).Msg("streamed content is not a prefix of the turn's content")
		rest = ""
	}
	if rest != "" || len(t.reply.ToolCalls) > 0 {
		d := &OutMessage{Content: &rest}
		for i, tc := range t.reply.ToolCalls {
			tc.Index = &i
			d.ToolCalls = append(d.ToolCalls, tc)
		}
		ch := Choice{Delta: d}
		if st.req.Logprobs {
			ch.Logprobs = &LogprobList{Content: tokenLogprobs(st.p, t.sampled, t.lps, t.top, min(st.lpSent, len(t.sampled)), len(t.sampled))}
			st.lpSent = len(t.sampled)
		}
		st.send(ch, nil)
		if rest != "" && st.firstContent.IsZero() {
			st.firstContent = time.Now()
		}
	}
	ch := Choice{Delta: &OutMessage{}, FinishReason: &t.finish}
	if st.req.Logprobs && st.lpSent < len(t.sampled) { // the stop token
		ch.Logprobs = &LogprobList{Content: tokenLogprobs(st.p, t.sampled, t.lps, t.top, st.lpSent, len(t.sampled))}
	}
	st.send(ch, nil)
	if st.req.StreamOptions != nil && st.req.StreamOptions.IncludeUsage {
		st.send(Choice{}, &Usage{PromptTokens: t.prompt, CompletionTokens: len(t.sampled), TotalTokens: t.prompt + len(t.sampled)})
	}
	fmt.Fprint(st.w, "data: [DONE]\n\n")
	if st.fl != nil {
		st.fl.Flush()
	}
}

// fail ends a stream that has started with an error event (OpenAI's shape; the
// openai clients raise it) and no finish reason: the turn is not acknowledged.
// Before the stream started it is an ordinary error answer.
func (st *streamer) fail(e *apiError) {
	if !st.started {
		writeError(st.w, e)
		return
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	fmt.Fprintf(st.w, "data: %s\n\n", b)
	if st.fl != nil {
		st.fl.Flush()
	}
}
