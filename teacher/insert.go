package teacher

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/hindsight-ai/hindsight/data/chatformat"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Template is how a model sees a hint: a complete turn of its chat format placed in
// front of the policy turn, so the assistant turn that follows begins exactly as
// sampled. The turn is Prefix, then Label and the hint text, then Suffix. Prefix and
// Suffix are harness text: their special-token strings ("<|im_start|>") become special
// ids. Label and the hint text are encoded injection-safe (tokenizer.Tokenizer.EncodeText):
// added-token strings in them, special or not, stay plain text.
type Template struct {
	// Preset fills Prefix and Suffix where they are empty with the user turn of the
	// chat format of that name (chatformat.Formats: chatml for Qwen and other ChatML
	// models, llama3, deepseek_v3, mistral ([INST]…[/INST]), bytes for the byte
	// tokenizer's own specials).
	Preset string `yaml:"preset"`
	Prefix string `yaml:"prefix"`
	Label  string `yaml:"label"`
	Suffix string `yaml:"suffix"`
}

// DefaultTemplate returns the ChatML user turn "Hint: …".
func DefaultTemplate() Template { return Template{Preset: "chatml", Label: "Hint: "} }

// resolved returns t with the preset's Prefix and Suffix (its format's User and
// UserEnd) filled in.
func (t Template) resolved() Template {
	if f, ok := chatformat.Named(t.Preset); ok {
		if t.Prefix == "" {
			t.Prefix = f.User
		}
		if t.Suffix == "" {
			t.Suffix = f.UserEnd
		}
	}
	return t
}

// For returns t for the policy's tokenizer tok: the default template (preset chatml,
// no prefix or suffix of its own) takes the preset of tok's own chat format
// (chatformat.Detect), so the byte tokenizer or a Llama 3 policy needs no template
// in its config; any other template is returned as it is.
func (t Template) For(tok tokenizer.Tokenizer) Template {
	if t.Preset != chatformat.ChatML.Name || t.Prefix != "" || t.Suffix != "" {
		return t
	}
	if f, ok := chatformat.Detect(tok); ok {
		t.Preset = f.Name
	}
	return t
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (t Template) Validate(prefix string) error {
	if t.Preset != "" {
		if _, ok := chatformat.Named(t.Preset); !ok {
			return fmt.Errorf("%spreset: unknown preset %q (want one of %s)", prefix, t.Preset,
				strings.Join(chatformat.Names(), ", "))
		}
	}
	if r := t.resolved(); r.Prefix == "" && r.Suffix == "" {
		return fmt.Errorf("%sprefix: a template needs a prefix or a suffix (or a preset) to make the hint its own turn", prefix)
	}
	return nil
}

// markerRE finds special-token-looking strings in template text: <|x|> and DeepSeek's
// full-width <｜x｜>.
var markerRE = regexp.MustCompile(`<\|[^|<>\s]+\|>|<｜[^｜<>\s]+｜>`)

// ErrHintTooLong is the error of Inserter.Wrap for a hint over the token cap.
var ErrHintTooLong = errors.New("hint too long")

// Inserter turns hint text into template tokens and splices them into a rollout. It is
// safe for concurrent use.
type Inserter struct {
	tok            tokenizer.Tokenizer
	prefix, suffix []int32
	label          string
	maxTokens      int
}

// NewInserter returns an Inserter for tmpl and tok that refuses hints of more than
// maxHintTokens tokens (0: no cap). Every special-token string in the template's
// Prefix and Suffix must be a special token of tok: a chat template of another model
// family would otherwise silently become plain text.
func NewInserter(tmpl Template, tok tokenizer.Tokenizer, maxHintTokens int) (*Inserter, error) {
	if err := tmpl.Validate("template."); err != nil {
		return nil, err
	}
	t := tmpl.resolved()
	for _, part := range []struct{ name, text string }{{"prefix", t.Prefix}, {"suffix", t.Suffix}} {
		for _, m := range markerRE.FindAllString(part.text, -1) {
			if _, ok := tok.SpecialID(m); !ok {
				return nil, fmt.Errorf("template.%s: %q is not a special token of tokenizer %s (preset %q fits another model family?)",
					part.name, m, tok.Fingerprint(), t.Preset)
			}
		}
	}
	return &Inserter{
		tok:       tok,
		prefix:    tok.Encode(t.Prefix),
		suffix:    tok.Encode(t.Suffix),
		label:     t.Label,
		maxTokens: maxHintTokens,
	}, nil
}

// Wrap returns the template tokens of hint text: prefix ids, the EncodeText ids of
// Label+text, suffix ids. The hint text can never produce a special or other
// added-token id (not even Qwen's <think> or DeepSeek V3's <｜Assistant｜>, which are
// added tokens not marked special). It returns ErrHintTooLong when text alone is over
// the cap.
func (in *Inserter) Wrap(text string) ([]int32, error) {
	text = strings.TrimSpace(text)
	if in.maxTokens > 0 {
		if n := len(in.tok.EncodeText(text)); n > in.maxTokens {
			return nil, fmt.Errorf("%w: %d tokens, cap %d", ErrHintTooLong, n, in.maxTokens)
		}
	}
	return in.wrap(text), nil
}

// Empty returns the template with an empty hint, for the q(∅) base of docs/design.md.
func (in *Inserter) Empty() []int32 { return in.wrap("") }

func (in *Inserter) wrap(text string) []int32 {
	out := append([]int32(nil), in.prefix...)
	out = append(out, in.tok.EncodeText(in.label+text)...)
	return append(out, in.suffix...)
}
