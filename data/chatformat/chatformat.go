// Package chatformat is the one table of the chat formats hindsight knows: for each
// model family the harness text that opens each role's turn, the token that closes
// a turn, and the special token that tells the family from a tokenizer. Every
// package that renders or recognises a turn reads it: toolworld renders episodes in
// it, teacher wraps a hint as a user turn of it (Template.Preset), train finds the
// assistant header a rollout without sampler log-probs trains past, and the daemon
// picks the hint template of the policy's tokenizer. Adding a family is one entry in
// Formats.
//
// In the data flow (docs/design.md) it is data: text and tokens, no model.
package chatformat

import (
	"maps"
	"slices"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Format is one family's chat format. Header and separator text is the harness's:
// its special-token strings become special ids when encoded (tokenizer.Encode); turn
// contents never do (tokenizer.EncodeText).
//
// Sep belongs to the turn it follows, as in Hugging Face ChatML templates
// ("<|im_end|>\n"), so a turn starts at its header and a whole user turn (User,
// text, UserEnd) inserted at a turn's start renders as the template would.
type Format struct {
	Name string // the name a config gives (teacher.template.preset)
	// Marker is a special token only tokenizers of this family have; Detect finds the
	// family by it.
	Marker string
	// The turn headers; "" where the family has none (Mistral's assistant turn,
	// DeepSeek V3's system prompt) or hindsight renders no such turn (a tool turn
	// outside ChatML and the byte tokenizer).
	System, User, Assistant, Tool string
	End                           string // closes a turn (the policy's stop token)
	Sep                           string // after a turn's End: harness context
	// UserEnd closes a user turn: End+Sep where the family closes every turn alike;
	// "" for DeepSeek V3, whose user turn ends where <｜Assistant｜> begins; [/INST]
	// for Mistral.
	UserEnd string
}

// The families, one value each.
var (
	// ChatML is Qwen's and other <|im_start|> models' format, with tool results in a
	// turn of role tool:
	//
	//	<|im_start|>user\n…<|im_end|>\n<|im_start|>assistant\nls notes<|im_end|>\n<|im_start|>tool\n…
	ChatML = Format{Name: "chatml", Marker: "<|im_start|>",
		System: "<|im_start|>system\n", User: "<|im_start|>user\n", Assistant: "<|im_start|>assistant\n", Tool: "<|im_start|>tool\n",
		End: "<|im_end|>", Sep: "\n", UserEnd: "<|im_end|>\n"}
	// Llama3 is Llama 3's header format.
	Llama3 = Format{Name: "llama3", Marker: "<|start_header_id|>",
		System:    "<|start_header_id|>system<|end_header_id|>\n\n",
		User:      "<|start_header_id|>user<|end_header_id|>\n\n",
		Assistant: "<|start_header_id|>assistant<|end_header_id|>\n\n",
		End:       "<|eot_id|>", UserEnd: "<|eot_id|>"}
	// DeepSeekV3 is DeepSeek V3's format (full-width bars in its markers).
	DeepSeekV3 = Format{Name: "deepseek_v3", Marker: "<｜Assistant｜>",
		User: "<｜User｜>", Assistant: "<｜Assistant｜>", End: "<｜end▁of▁sentence｜>"}
	// Bytes is the byte tokenizer's format, the one tokenizer.BytesChatTemplate writes:
	//
	//	<|system|>…<|end|><|user|>…<|end|><|assistant|>ls notes<|end|><|tool|>owl.txt<|end|>…
	Bytes = Format{Name: "bytes", Marker: "<|assistant|>",
		System: "<|system|>", User: "<|user|>", Assistant: "<|assistant|>", Tool: "<|tool|>",
		End: "<|end|>", UserEnd: "<|end|>"}
	// Mistral is Mistral's instruction format (v3/Tekken: no spaces); its assistant
	// turn has no header.
	Mistral = Format{Name: "mistral", Marker: "[INST]", User: "[INST]", End: "</s>", UserEnd: "[/INST]"}
)

// Formats are the families in the order Detect tries them.
var Formats = []Format{ChatML, Llama3, DeepSeekV3, Bytes, Mistral}

// Named returns the family called name.
func Named(name string) (Format, bool) {
	for _, f := range Formats {
		if f.Name == name {
			return f, true
		}
	}
	return Format{}, false
}

// Names returns the families' names, sorted.
func Names() []string {
	names := map[string]bool{}
	for _, f := range Formats {
		names[f.Name] = true
	}
	return slices.Sorted(maps.Keys(names))
}

// Detect returns the first family (in Formats order) whose Marker is a special
// token of tok.
func Detect(tok tokenizer.Tokenizer) (Format, bool) {
	for _, f := range Formats {
		if _, ok := tok.SpecialID(f.Marker); ok {
			return f, true
		}
	}
	return Format{}, false
}
