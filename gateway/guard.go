package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Content special tokens (gateway.content_special_tokens): what a special-token
// string such as "<|im_end|>" in a message's text becomes.
const (
	// ContentSpecialText encodes it as the ordinary text it spells, as Hugging
	// Face's split_special_tokens=True does, so a message cannot forge a turn.
	ContentSpecialText = "text"
	// ContentSpecialControl encodes it as the special token, as
	// apply_chat_template(tokenize=True) does by default.
	ContentSpecialControl = "control"
)

// contentGuard keeps the special-token strings in the client's message text out
// of the recorded tokens' control ids. Before the chat template renders the
// messages, each such string in their text is replaced by a sentinel the template
// passes through unchanged; after, encode turns a rendered piece into ids with the
// template's own special tokens as their ids and each sentinel as the plain text of
// the string it stands for. A nil guard changes nothing (content_special_tokens:
// control).
type contentGuard struct {
	tok      tokenizer.Tokenizer
	nonce    string   // per turn: no client text can spell a sentinel
	specials []string // the strings the sentinels stand for; index k is sentinel k
	index    map[string]int
}

// sentinelRe matches a sentinel: U+F0000, the nonce, the string's index, U+F0001
// (Supplementary Private Use Area-A, so no tokenizer or template gives them
// meaning).
var sentinelRe = regexp.MustCompile("\U000F0000([0-9a-f]{16})-([0-9]+)\U000F0001")

// newContentGuard returns the guard of one turn on tok; nil for mode control.
func newContentGuard(tok tokenizer.Tokenizer, mode string) *contentGuard {
	if mode == ContentSpecialControl {
		return nil
	}
	var b [8]byte
	rand.Read(b[:])
	return &contentGuard{tok: tok, nonce: hex.EncodeToString(b[:]), index: map[string]int{}}
}

// specialsIn returns the special-token strings text holds: the strings of the ids
// that Encode gives and EncodePlain does not (non-special added tokens such as
// Qwen's "<think>" are matched by both and are not special), longest first. Two
// encodings of text, and a decode per special id found.
func specialsIn(tok tokenizer.Tokenizer, text string) []string {
	plain := map[int32]bool{}
	for _, id := range tok.EncodePlain(text) {
		plain[id] = true
	}
	var out []string
	for _, id := range tok.Encode(text) {
		if plain[id] {
			continue
		}
		plain[id] = true // each id once
		s, err := tok.Decode([]int32{id})
		if err != nil || len(s) < 2 {
			continue
		}
		if p := tok.EncodePlain(s); len(p) != 1 || p[0] != id {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// text returns s with each special-token string replaced by its sentinel.
func (g *contentGuard) text(s string) string {
	if g == nil || s == "" {
		return s
	}
	for _, sp := range specialsIn(g.tok, s) {
		k, ok := g.index[sp]
		if !ok {
			k = len(g.specials)
			g.specials = append(g.specials, sp)
			g.index[sp] = k
		}
		s = strings.ReplaceAll(s, sp, fmt.Sprintf("\U000F0000%s-%d\U000F0001", g.nonce, k))
	}
	return s
}

// messages returns msgs with the client's text in the new ones (from index from
// on) guarded: content, names, tool call ids, names and arguments, tool_call_id.
// The recorded ones are rendered only to find where the new ones start, never
// encoded again, so they are left as they are.
func (g *contentGuard) messages(msgs []chatMessage, from int) []chatMessage {
	if g == nil {
		return msgs
	}
	out := slices.Clone(msgs)
	for i, m := range msgs {
		if i < from {
			continue
		}
		m.Content, m.Name, m.ToolCallID = g.text(m.Content), g.text(m.Name), g.text(m.ToolCallID)
		if len(m.ToolCalls) > 0 {
			m.ToolCalls = slices.Clone(m.ToolCalls)
			for j := range m.ToolCalls {
				tc := &m.ToolCalls[j]
				tc.ID, tc.Function.Name, tc.Function.Arguments = g.text(tc.ID), g.text(tc.Function.Name), g.text(tc.Function.Arguments)
			}
		}
		out[i] = m
	}
	return out
}

// restore returns s with every sentinel replaced by the string it stands for.
func (g *contentGuard) restore(s string) string {
	if g == nil || !strings.Contains(s, "\U000F0000") {
		return s
	}
	return sentinelRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := sentinelRe.FindStringSubmatch(m)
		k, _ := strconv.Atoi(sub[2])
		if sub[1] != g.nonce || k >= len(g.specials) {
			return m
		}
		return g.specials[k]
	})
}

// encode returns the ids of a rendered piece: the template's own special tokens
// become their ids; the client's special-token strings (sentinels) are ordinary
// text, encoded with the text around them as one run, as split_special_tokens does.
// A piece without a sentinel is exactly tok.Encode(text). An error says the
// template changed a sentinel (it transformed the client's text).
func (g *contentGuard) encode(tok tokenizer.Tokenizer, text string) ([]int32, error) {
	if g == nil || !strings.Contains(text, "\U000F0000") {
		return tok.Encode(text), nil
	}
	// Split the text at the sentinels: the parts between them are the template's
	// (and the client's ordinary text); the template's special tokens are found
	// there only.
	var ids []int32
	var run strings.Builder // ordinary text since the last special token
	flush := func() {
		if run.Len() > 0 {
			ids = append(ids, tok.EncodePlain(run.String())...)
			run.Reset()
		}
	}
	rest := text
	for rest != "" {
		loc := sentinelRe.FindStringSubmatchIndex(rest)
		part := rest
		if loc != nil {
			part = rest[:loc[0]]
		}
		if strings.ContainsAny(part, "\U000F0000\U000F0001") {
			return nil, errors.New("encode turn: the chat template changed the text around a special-token string of a message")
		}
		// The template's part: its special tokens are ids, the rest joins the run.
		specials := specialsIn(tok, part)
		for part != "" {
			at, which := len(part), ""
			for _, sp := range specials {
				if i := strings.Index(part, sp); i >= 0 && (i < at || i == at && len(sp) > len(which)) {
					at, which = i, sp
				}
			}
			run.WriteString(part[:at])
			if which == "" {
				break
			}
			flush()
			ids = append(ids, tok.Encode(which)...)
			part = part[at+len(which):]
		}
		if loc == nil {
			break
		}
		k, _ := strconv.Atoi(rest[loc[4]:loc[5]])
		if rest[loc[2]:loc[3]] != g.nonce || k >= len(g.specials) {
			return nil, errors.New("encode turn: a sentinel the gateway did not write")
		}
		run.WriteString(g.specials[k])
		rest = rest[loc[1]:]
	}
	flush()
	return ids, nil
}
