package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// piece is the rendered text of one new message (or of the generation prompt) and
// the segment its tokens get.
type piece struct {
	text   string
	kind   rollout.SegmentKind
	tool   string
	status rollout.ToolStatus
}

// delta renders what msgs adds to the first k (already recorded) messages: one piece
// per new message, each the difference between the template's renders of msgs[:i]
// and msgs[:i+1], and the generation prompt. The earlier turns are never rendered
// into tokens again: only these differences are. Some templates render history
// differently once it grows (Qwen3 drops the reasoning of assistant turns before the
// last user message): then the differences are taken over the last recorded message
// alone, which such templates render the same way before and after. ok is false when
// neither gives a consistent difference: the session cannot continue without drift.
func delta(t *chatTemplate, msgs []chatMessage, tools []any, k int) (pieces []piece, gen string, ok bool, err error) {
	pieces, gen, ok, err = deltaFrom(t, msgs, tools, k, 0)
	if err == nil && !ok && k > 1 {
		pieces, gen, ok, err = deltaFrom(t, msgs, tools, k, k-1)
	}
	return pieces, gen, ok, err
}

// deltaFrom is delta over the messages from lo on (the rendered context starts at
// msgs[lo]).
func deltaFrom(t *chatTemplate, msgs []chatMessage, tools []any, k, lo int) (pieces []piece, gen string, ok bool, err error) {
	full, err := t.render(msgs[lo:], tools, true)
	if err != nil {
		return nil, "", false, err
	}
	at := ""
	if k > lo {
		if at, err = t.render(msgs[lo:k], tools, false); err != nil {
			return nil, "", false, err
		}
		if !strings.HasPrefix(full, at) {
			return nil, "", false, nil
		}
	}
	start := at
	for i := k; i < len(msgs); i++ {
		r, err := t.render(msgs[lo:i+1], tools, false)
		if err != nil || !strings.HasPrefix(r, at) || !strings.HasPrefix(full, r) {
			// The template does not render message by message: the new messages
			// become one piece, with the last one's role.
			kind, tool, st := segmentOf(msgs, len(msgs)-1)
			return []piece{{text: full[len(start):], kind: kind, tool: tool, status: st}}, "", true, nil
		}
		kind, tool, st := segmentOf(msgs, i)
		pieces = append(pieces, piece{text: r[len(at):], kind: kind, tool: tool, status: st})
		at = r
	}
	return pieces, full[len(at):], true, nil
}

// turn is one answered request.
type turn struct {
	rec     *turnRecord
	reply   chatMessage
	finish  string
	sampled []int32
	lps     []float32
	top     [][]xla.TokenLogProb // with top_logprobs: each sampled token's alternatives
	prompt  int                  // prompt tokens
	policy  *policy
}

// sampleTurn renders the request's new messages onto s's tokens, samples the reply
// and returns the turn, not yet journaled. s is locked by the caller. onToken, when
// set, sees each token as it is sampled (the streamer).
func (g *Gateway) sampleTurn(ctx context.Context, p *policy, s *session, req *ChatRequest, msgs []chatMessage, tools []any, k int, onToken func(int32, float32, []xla.TokenLogProb)) (*turn, *apiError) {
	guard := newContentGuard(p.tok, g.cfg.ContentSpecialTokens)
	pieces, gen, ok, err := delta(p.template, guard.messages(msgs, k), tools, k)
	if err != nil {
		return nil, badRequest("", "%v", err)
	}
	if !ok {
		return nil, badRequest("session_drift", "the chat template renders session %s's earlier messages differently now; start a new session", s.id)
	}
	rec := &turnRecord{Turn: s.turns + 1, PolicyVersion: p.step, Tokenizer: p.tok.Fingerprint()}
	base := int32(len(s.tokens))
	add := func(ids []int32, lps []float32, sampled bool) {
		rec.Tokens = append(rec.Tokens, ids...)
		for i := range ids {
			if sampled {
				v := lps[i]
				rec.LogProbs = append(rec.LogProbs, &v)
			} else {
				rec.LogProbs = append(rec.LogProbs, nil)
			}
		}
	}
	for _, pc := range pieces {
		ids, err := guard.encode(p.tok, pc.text)
		if err != nil {
			return nil, badRequest("", "%v", err)
		}
		if len(ids) == 0 {
			continue
		}
		start := base + int32(len(rec.Tokens))
		add(ids, nil, false)
		rec.Segments = append(rec.Segments, segRecord{Start: start, End: start + int32(len(ids)), Kind: pc.kind.String(), Tool: guard.restore(pc.tool), Status: int8(pc.status)})
	}
	replyStart := base + int32(len(rec.Tokens))
	genIDs, err := guard.encode(p.tok, gen)
	if err != nil {
		return nil, badRequest("", "%v", err)
	}
	add(genIDs, nil, false)
	prompt := slices.Concat(s.tokens, rec.Tokens)
	if len(prompt) == 0 {
		return nil, badRequest("", "messages: the chat template rendered nothing")
	}
	if len(prompt) >= p.maxPos {
		return nil, badRequest("context_length_exceeded", "this conversation is %d tokens; the context served is %d tokens (gateway.max_context_tokens %d, the model's max_position_embeddings %d), and the reply needs at least one", len(prompt), p.maxPos, g.cfg.MaxContextTokens, p.modelMax)
	}
	opts, aerr := g.sampleOptions(req, p, len(prompt))
	if aerr != nil {
		return nil, aerr
	}
	// The turn's sampling temperature, for the rollout (docs/gateway.md): the
	// request's, OpenAI's default 1 when it names none, 0 when greedy (top_k 1 is
	// greedy at any temperature).
	temp := opts.Temperature
	if opts.TopK == 1 {
		temp = 0
	}
	rec.Temperature = &temp
	if onToken != nil {
		opts.OnToken = func(_ int, tok int32, lp float32, top []xla.TokenLogProb) { onToken(tok, lp, top) }
	}
	smp, err := p.generate(ctx, prompt, opts)
	if err != nil {
		var up *upstreamError
		switch {
		case errors.Is(err, xla.ErrTooLong):
			return nil, badRequest("context_length_exceeded", "%v", err)
		case errors.As(err, &up):
			code := "upstream_error"
			return nil, &apiError{status: http.StatusBadGateway, Message: err.Error(), Type: "server_error", Code: &code}
		}
		return nil, &apiError{status: 500, Message: fmt.Sprintf("sample: %v", err), Type: "server_error"}
	}
	toks, lps, top := smp.Tokens, smp.LogProbs, smp.Top
	finish := "length"
	if smp.Reason == xla.StopToken {
		finish = "stop"
	}
	stops, _ := req.stops()
	endsWithStop := smp.Reason == xla.StopToken
	// One of stop_token_ids (not the template's turn end) is recorded as sampled,
	// kept out of the content, and the turn closed with the template's end token,
	// as after a stop string.
	ownStop := endsWithStop && !slices.Contains(p.stops, toks[len(toks)-1])
	var content string
	if cut, text, found := cutAtStop(p, toks, stops); found {
		toks, lps, content, finish, endsWithStop = toks[:cut], lps[:cut], text, "stop", false
	} else if cut, text, found := cutAfterFirstCall(p, toks, req); found {
		toks, lps, content, endsWithStop = toks[:cut], lps[:cut], text, false
	} else {
		body := toks
		if endsWithStop {
			body = toks[:len(toks)-1]
		}
		content, _ = p.tok.Decode(body)
		endsWithStop = endsWithStop && !ownStop
	}
	top = top[:min(len(top), len(toks))]
	reply := chatMessage{Role: "assistant", Content: content, Status: -1}
	if req.toolCalls() {
		var calls []ToolCall
		n := 0
		reply.Content, calls = parseToolCalls(content, func() string { n++; return fmt.Sprintf("call_%s_%d_%d", s.id, rec.Turn, n) })
		reply.ToolCalls = calls
		if len(calls) > 0 {
			finish = "tool_calls"
		}
	}
	add(toks, lps, true)
	// Close the turn as the template renders it (its end token after a length stop,
	// a newline after the end token), so the next turn's difference starts where
	// these tokens end.
	closing := g.closing(p, msgs, reply, tools, toks, endsWithStop)
	add(p.tok.Encode(closing), nil, false)
	kind, tool := rollout.KindAssistant, ""
	if len(reply.ToolCalls) > 0 {
		kind, tool = rollout.KindToolCall, toolNames(reply.ToolCalls)
	}
	rec.Segments = append(rec.Segments, segRecord{Start: replyStart, End: base + int32(len(rec.Tokens)), Kind: kind.String(), Tool: tool, Status: -1})
	rec.Messages = append(slices.Clone(msgs), reply)
	if v, ok := req.Metadata["task_id"]; ok {
		rec.TaskID = v
	}
	if v, ok := req.Metadata["reward"]; ok {
		if rec.Reward, aerr = parseReward("metadata.reward", v); aerr != nil {
			return nil, aerr
		}
	}
	return &turn{rec: rec, reply: reply, finish: finish, sampled: toks, lps: lps, top: top, prompt: len(prompt), policy: p}, nil
}

// cutAtStop finds the first stop string in the decoded sample: it returns the
// number of tokens to keep (through the token that completes the stop string) and
// the text before the stop string.
func cutAtStop(p *policy, toks []int32, stops []string) (int, string, bool) {
	if len(stops) == 0 {
		return 0, "", false
	}
	for n := 1; n <= len(toks); n++ {
		text, _ := p.tok.Decode(toks[:n])
		for _, s := range stops {
			if s == "" {
				continue
			}
			if i := strings.Index(text, s); i >= 0 {
				return n, text[:i], true
			}
		}
	}
	return 0, "", false
}

// closing returns the text the template puts after the sampled tokens of this
// reply: what follows the sampled text in its render of the reply, or, where the
// template renders the reply otherwise (tool calls reformatted), what follows its
// last turn-end token (with the token itself when the sample did not end with one).
func (g *Gateway) closing(p *policy, msgs []chatMessage, reply chatMessage, tools []any, toks []int32, endsWithStop bool) string {
	prompt, err1 := p.template.render(msgs, tools, true)
	whole, err2 := p.template.render(append(slices.Clone(msgs), reply), tools, false)
	sampled, _ := p.tok.Decode(toks)
	if err1 == nil && err2 == nil && strings.HasPrefix(whole, prompt) {
		a := whole[len(prompt):]
		if strings.HasPrefix(a, sampled) {
			return a[len(sampled):]
		}
		for _, name := range p.template.stopTokens {
			if i := strings.LastIndex(a, name); i >= 0 {
				if endsWithStop {
					return a[i+len(name):]
				}
				return a[i:]
			}
		}
	}
	if !endsWithStop {
		return p.template.stopTokens[0]
	}
	return ""
}
