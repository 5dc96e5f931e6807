package gateway

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
)

// qwen3 returns the Qwen3 tokenizer fixture and Qwen3-8B's own chat template
// (testdata/qwen3_chat_template.jinja, from github.com/ardanlabs/jinja's test data).
func qwen3(t *testing.T) *policy {
	t.Helper()
	tok := tokenizertest.Load(t, "qwen3")
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "qwen3_chat_template.jinja"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), src, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<|im_end|>"}`), 0o644))
	tmpl, err := loadTemplate(dir, tok)
	require.NoError(t, err)
	require.Equal(t, "chat_template.jinja", tmpl.source)
	return &policy{tok: tok, template: tmpl}
}

// recorder plays the gateway's side of a session at the token level: the rendered
// differences of new messages, then "sampled" text, then the turn's closing.
type recorder struct {
	t      *testing.T
	p      *policy
	tools  []any
	msgs   []chatMessage
	tokens []int32
	kinds  []string
}

func (r *recorder) turn(newMsgs []chatMessage, sampled string) chatMessage {
	r.t.Helper()
	r.msgs = append(r.msgs, newMsgs...)
	pieces, gen, ok, err := delta(r.p.template, r.msgs, r.tools, len(r.msgs)-len(newMsgs))
	require.NoError(r.t, err)
	require.True(r.t, ok, "the session continues without drift")
	for _, pc := range pieces {
		r.tokens = append(r.tokens, r.p.tok.Encode(pc.text)...)
		k := pc.kind.String()
		if pc.tool != "" {
			k += ":" + pc.tool
		}
		r.kinds = append(r.kinds, k)
	}
	r.tokens = append(r.tokens, r.p.tok.Encode(gen)...)
	ids := r.p.tok.Encode(sampled) // as if the policy had sampled them
	r.tokens = append(r.tokens, ids...)
	body, _ := r.p.tok.Decode(ids[:len(ids)-1])
	n := 0
	content, calls := parseToolCalls(body, func() string { n++; return "call_" + string(rune('a'+n)) })
	reply := chatMessage{Role: "assistant", Content: content, ToolCalls: calls, Status: -1}
	g := &Gateway{}
	r.tokens = append(r.tokens, r.p.tok.Encode(g.closing(r.p, r.msgs, reply, r.tools, ids, true))...)
	r.msgs = append(r.msgs, reply)
	return reply
}

func (r *recorder) text() string {
	s, err := r.p.tok.Decode(r.tokens)
	require.NoError(r.t, err)
	return s
}

// TestQwen3SessionWithoutDrift records a reasoning, tool-calling Qwen3 session
// with the model's own template: each turn appends only the new messages'
// rendered tokens; where the template renders the history differently (it drops
// the reasoning of an answered query) the sampled tokens stay as they were.
func TestQwen3SessionWithoutDrift(t *testing.T) {
	p := qwen3(t)
	tools, aerr := toolDefs(mustRaw(`{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}`))
	require.Nil(t, aerr)
	r := &recorder{t: t, p: p, tools: tools}
	first := "<think>\nI should look it up.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call><|im_end|>"
	reply := r.turn([]chatMessage{{Role: "system", Content: "Be brief.", Status: -1}, {Role: "user", Content: "Weather in Oslo?", Status: -1}}, first)
	require.Len(t, reply.ToolCalls, 1)
	require.Equal(t, "get_weather", reply.ToolCalls[0].Function.Name)
	require.Equal(t, `{"city":"Oslo"}`, reply.ToolCalls[0].Function.Arguments)
	afterFirst := slices.Clone(r.tokens)

	r.turn([]chatMessage{{Role: "tool", ToolCallID: reply.ToolCalls[0].ID, Content: `{"celsius": 21}`, Status: 0}}, "<think>\n\n</think>\n\nIt is 21 °C.<|im_end|>")
	require.Equal(t, afterFirst, r.tokens[:len(afterFirst)], "earlier tokens are never re-tokenised")
	// Up to here the template renders the conversation exactly as it was sampled.
	whole, err := p.template.render(r.msgs, tools, false)
	require.NoError(t, err)
	require.Equal(t, whole, r.text())

	before := r.text()
	r.turn([]chatMessage{{Role: "user", Content: "And tomorrow?", Status: -1}}, "No idea.<|im_end|>")
	require.Equal(t, []string{"system", "user", "tool_result:get_weather", "user"}, r.kinds)
	require.True(t, strings.HasPrefix(r.text(), before+"<|im_start|>user\nAnd tomorrow?<|im_end|>\n<|im_start|>assistant\n"), r.text())
	require.Contains(t, r.text(), "<think>\nI should look it up.\n</think>", "the sampled reasoning stays in the record")
	rerendered, err := p.template.render(r.msgs, tools, false)
	require.NoError(t, err)
	require.NotContains(t, rerendered, "I should look it up", "the template itself drops it: re-rendering would have drifted")
}

// TestBytesTemplatePieces checks the byte tokenizer's template pieces and kinds.
func TestBytesTemplatePieces(t *testing.T) {
	tok := tokenizer.NewBytes()
	tmpl, err := loadTemplate(t.TempDir(), tok)
	require.NoError(t, err)
	require.Equal(t, []string{"<|end|>"}, tmpl.stopTokens)
	msgs := []chatMessage{{Role: "system", Content: "s", Status: -1}, {Role: "user", Content: "u", Status: -1}}
	pieces, gen, ok, err := delta(tmpl, msgs, nil, 0)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "<|system|>s<|end|>", pieces[0].text)
	require.Equal(t, "<|user|>u<|end|>", pieces[1].text)
	require.Equal(t, "<|assistant|>", gen)
	msgs = append(msgs, chatMessage{Role: "assistant", Content: "a", Status: -1}, chatMessage{Role: "tool", Name: "ls", Content: "x", Status: 1})
	pieces, gen, ok, err = delta(tmpl, msgs, nil, 3)
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, pieces, 1)
	require.Equal(t, piece{text: "<|tool|>x<|end|>", kind: 6, tool: "ls", status: 1}, pieces[0])
	require.Equal(t, "<|assistant|>", gen)
}

func TestParseToolCalls(t *testing.T) {
	ids := func() string { return "id" }
	for _, tc := range []struct {
		in, content string
		calls       []string // name(args)
	}{
		{"plain text", "plain text", nil},
		{"<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"dir\": \"a\"}}\n</tool_call>", "", []string{`ls({"dir":"a"})`}},
		{"Let me see. <tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"b\",\"arguments\":\"{\\\"x\\\":1}\"}</tool_call>", "Let me see.", []string{"a({})", `b({"x":1})`}},
		{"<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", nil},
		{"<tool_call>{\"name\": \"cut", "<tool_call>{\"name\": \"cut", nil},
	} {
		content, calls := parseToolCalls(tc.in, ids)
		require.Equal(t, tc.content, content, tc.in)
		var got []string
		for _, c := range calls {
			got = append(got, c.Function.Name+"("+c.Function.Arguments+")")
		}
		require.Equal(t, tc.calls, got, tc.in)
	}
}
