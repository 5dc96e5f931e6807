package toolworld

import (
	"fmt"
	"regexp"

	"github.com/hindsight-ai/hindsight/data/chatformat"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// FormatFor returns the chat format of tok (chatformat.Detect), when it has the four
// turns an episode renders (system, user, assistant, tool): the byte tokenizer's and
// ChatML today.
func FormatFor(tok tokenizer.Tokenizer) (chatformat.Format, error) {
	if f, ok := chatformat.Detect(tok); ok && f.System != "" && f.User != "" && f.Assistant != "" && f.Tool != "" {
		return f, nil
	}
	return chatformat.Format{}, fmt.Errorf("chat format of tokenizer %s: neither the byte tokenizer nor ChatML (<|im_start|>, <|im_end|>); pass Options.Format", tok.Fingerprint())
}

var markerRE = regexp.MustCompile(`<\|[^|<>\s]+\|>`)

// renderer is a Format compiled for one tokenizer.
type renderer struct {
	tok    tokenizer.Tokenizer
	header map[string][]int32 // role → header ids
	end    []int32
	sep    []int32
	stop   int32
}

// Roles of a turn.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

func newRenderer(f chatformat.Format, tok tokenizer.Tokenizer) (*renderer, error) {
	r := &renderer{tok: tok, header: map[string][]int32{}}
	parts := []struct{ name, text string }{{RoleSystem, f.System}, {RoleUser, f.User},
		{RoleAssistant, f.Assistant}, {RoleTool, f.Tool}, {"end", f.End}, {"sep", f.Sep}}
	for i, p := range parts {
		for _, m := range markerRE.FindAllString(p.text, -1) {
			if _, ok := tok.SpecialID(m); !ok {
				return nil, fmt.Errorf("chat format %s: %s: %q is not a special token of tokenizer %s", f.Name, p.name, m, tok.Fingerprint())
			}
		}
		if i < 4 { // the four role headers
			if p.text == "" {
				return nil, fmt.Errorf("chat format %s: %s header is empty", f.Name, p.name)
			}
			r.header[p.name] = tok.Encode(p.text)
		}
	}
	r.end, r.sep = tok.Encode(f.End), tok.Encode(f.Sep)
	if len(r.end) != 1 {
		return nil, fmt.Errorf("chat format %s: end %q is %d tokens; it must be one (the stop token)", f.Name, f.End, len(r.end))
	}
	r.stop = r.end[0]
	return r, nil
}

// turn returns a whole harness turn: header, content encoded injection-safe, end,
// separator.
func (r *renderer) turn(role, content string) []int32 {
	out := append([]int32(nil), r.header[role]...)
	out = append(out, r.tok.EncodeText(content)...)
	out = append(out, r.end...)
	return append(out, r.sep...)
}
