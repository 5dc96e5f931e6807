package toolworld

import (
	"fmt"
	"regexp"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Format is a chat format: the harness text that opens each role's turn, the token
// that closes every turn (the policy's stop token) and the harness text after it.
// Header and separator text is the harness's: its special-token strings become
// special ids. Turn contents (the task, tool output, the policy's own tokens) never do.
//
// Sep belongs to the turn it follows, as in Hugging Face ChatML templates
// ("<|im_end|>\n"), so a turn starts at its header: the teacher's hint template
// (teacher.Template, a whole user turn with its own trailing separator) inserted at a
// turn's start renders exactly as Env.Hint does.
type Format struct {
	Name                          string
	System, User, Assistant, Tool string // turn headers
	End                           string // closes a turn; must be one special token
	Sep                           string // after a turn's End: harness context
}

// BytesFormat is the byte tokenizer's chat format, the one tokenizer.BytesChatTemplate
// writes:
//
//	<|system|>…<|end|><|user|>…<|end|><|assistant|>ls notes<|end|><|tool|>owl.txt<|end|>…
var BytesFormat = Format{
	Name: "bytes", System: "<|system|>", User: "<|user|>", Assistant: "<|assistant|>", Tool: "<|tool|>",
	End: "<|end|>",
}

// ChatMLFormat is ChatML (Qwen and other <|im_start|> models), with tool results in a
// turn of role tool:
//
//	<|im_start|>user\n…<|im_end|>\n<|im_start|>assistant\nls notes<|im_end|>\n<|im_start|>tool\n…
var ChatMLFormat = Format{
	Name: "chatml", System: "<|im_start|>system\n", User: "<|im_start|>user\n",
	Assistant: "<|im_start|>assistant\n", Tool: "<|im_start|>tool\n",
	End: "<|im_end|>", Sep: "\n",
}

// FormatFor returns the chat format of tok: BytesFormat for the byte tokenizer,
// ChatMLFormat for a tokenizer with <|im_start|> and <|im_end|>.
func FormatFor(tok tokenizer.Tokenizer) (Format, error) {
	if tok.Fingerprint() == tokenizer.BytesFingerprint {
		return BytesFormat, nil
	}
	_, start := tok.SpecialID("<|im_start|>")
	_, end := tok.SpecialID("<|im_end|>")
	if start && end {
		return ChatMLFormat, nil
	}
	return Format{}, fmt.Errorf("chat format of tokenizer %s: neither the byte tokenizer nor ChatML (<|im_start|>, <|im_end|>); pass Options.Format", tok.Fingerprint())
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

func newRenderer(f Format, tok tokenizer.Tokenizer) (*renderer, error) {
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
