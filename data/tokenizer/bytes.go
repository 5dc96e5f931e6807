package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
)

// Ids of the byte tokenizer: ids 0–255 are the bytes themselves, the named
// special tokens follow from 256.
const (
	BytesBOS       int32             = 256 + iota // "<|bos|>": beginning of a sequence
	BytesEOS                                      // "<|eos|>": end of a sequence
	BytesHint                                     // "<|hint|>": opens a teacher hint
	BytesHintEnd                                  // "<|/hint|>": closes a teacher hint
	BytesSystem                                   // "<|system|>": starts a system turn
	BytesUser                                     // "<|user|>": starts a user turn
	BytesAssistant                                // "<|assistant|>": starts an assistant turn
	BytesTool                                     // "<|tool|>": starts a tool-result turn
	BytesEnd                                      // "<|end|>": ends a turn
	BytesVocabSize = int(iota + 256)              // number of ids of the byte tokenizer
)

// BytesFingerprint is the fingerprint of the byte tokenizer in rollout files.
const BytesFingerprint = "bytes-v1"

// BytesChatTemplate is the byte tokenizer's chat format as a Jinja chat_template (the
// tokenizer_config.json field transformers' apply_chat_template reads): each message
// is its role's special token, the content, and <|end|>; roles are system, user,
// assistant and tool; the generation prompt is <|assistant|>. No separator, no BOS:
//
//	<|system|>…<|end|><|user|>…<|end|><|assistant|>…<|end|><|tool|>…<|end|><|assistant|>
const BytesChatTemplate = "{% for message in messages %}" +
	"{% if message['role'] not in ['system', 'user', 'assistant', 'tool'] %}" +
	"{{ raise_exception('role ' + message['role'] + ' is not one of system, user, assistant, tool') }}{% endif %}" +
	"{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"

// bytesSpecials are the special tokens' contents, index i is id 256+i.
var bytesSpecials = [...]string{
	"<|bos|>", "<|eos|>", "<|hint|>", "<|/hint|>",
	"<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>",
}

// Bytes is the embedded byte tokenizer: one id per UTF-8 byte and a few
// named special tokens (BytesBOS…BytesEnd). Its zero value is not usable; use
// NewBytes.
type Bytes struct {
	specials map[string]int32
}

// NewBytes returns the byte tokenizer.
func NewBytes() *Bytes {
	t := &Bytes{specials: make(map[string]int32, len(bytesSpecials))}
	for i, s := range bytesSpecials {
		t.specials[s] = int32(256 + i)
	}
	return t
}

// Encode implements Tokenizer: special-token strings become their ids, the
// longest one first where two start at the same byte.
func (t *Bytes) Encode(text string) []int32 {
	text = validUTF8(text)
	ids := make([]int32, 0, len(text))
	for len(text) > 0 {
		i := strings.Index(text, "<|")
		if i < 0 {
			break
		}
		ids = appendBytes(ids, text[:i])
		text = text[i:]
		best := -1
		for j, s := range bytesSpecials {
			if strings.HasPrefix(text, s) && (best < 0 || len(s) > len(bytesSpecials[best])) {
				best = j
			}
		}
		if best < 0 {
			ids = append(ids, '<')
			text = text[1:]
			continue
		}
		ids = append(ids, int32(256+best))
		text = text[len(bytesSpecials[best]):]
	}
	return appendBytes(ids, text)
}

// EncodePlain implements Tokenizer: one id per byte, never a special id.
func (t *Bytes) EncodePlain(text string) []int32 {
	text = validUTF8(text)
	return appendBytes(make([]int32, 0, len(text)), text)
}

// EncodeText implements Tokenizer: the same as EncodePlain, as every added token of
// the byte tokenizer is special.
func (t *Bytes) EncodeText(text string) []int32 { return t.EncodePlain(text) }

func appendBytes(ids []int32, s string) []int32 {
	for i := 0; i < len(s); i++ {
		ids = append(ids, int32(s[i]))
	}
	return ids
}

// Decode implements Tokenizer.
func (t *Bytes) Decode(ids []int32) (string, error) {
	b := make([]byte, 0, len(ids))
	for i, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b = append(b, byte(id))
		case id >= 256 && int(id) < BytesVocabSize:
			b = append(b, bytesSpecials[id-256]...)
		default:
			return "", fmt.Errorf("decode tokens: id %d at position %d is outside the byte tokenizer's vocabulary [0, %d)", id, i, BytesVocabSize)
		}
	}
	return validUTF8(string(b)), nil
}

// SpecialID implements Tokenizer.
func (t *Bytes) SpecialID(name string) (int32, bool) {
	id, ok := t.specials[name]
	return id, ok
}

// VocabSize implements Tokenizer: BytesVocabSize.
func (t *Bytes) VocabSize() int { return BytesVocabSize }

// Fingerprint implements Tokenizer: BytesFingerprint.
func (t *Bytes) Fingerprint() string { return BytesFingerprint }

var bytesJSON = sync.OnceValue(func() []byte {
	type byteLevel struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		TrimOffsets    bool   `json:"trim_offsets"`
		UseRegex       bool   `json:"use_regex"`
	}
	added := make([]addedTokenJSON, len(bytesSpecials))
	for i, s := range bytesSpecials {
		added[i] = addedTokenJSON{ID: int32(256 + i), Content: s, Special: true}
	}
	bl := byteLevel{Type: "ByteLevel"}
	var vocab strings.Builder
	vocab.WriteByte('{')
	for b := range 256 {
		if b > 0 {
			vocab.WriteByte(',')
		}
		fmt.Fprintf(&vocab, "%s:%d", jsonString(string(byteToRune[b])), b)
	}
	vocab.WriteByte('}')
	doc := struct {
		Version       string           `json:"version"`
		Truncation    any              `json:"truncation"`
		Padding       any              `json:"padding"`
		AddedTokens   []addedTokenJSON `json:"added_tokens"`
		Normalizer    any              `json:"normalizer"`
		PreTokenizer  byteLevel        `json:"pre_tokenizer"`
		PostProcessor any              `json:"post_processor"`
		Decoder       byteLevel        `json:"decoder"`
		Model         json.RawMessage  `json:"model"`
	}{
		Version:      "1.0",
		AddedTokens:  added,
		PreTokenizer: bl,
		Decoder:      bl,
		Model: json.RawMessage(`{"type":"BPE","dropout":null,"unk_token":null,"continuing_subword_prefix":null,` +
			`"end_of_word_suffix":null,"fuse_unk":false,"byte_fallback":false,"ignore_merges":false,"vocab":` +
			vocab.String() + `,"merges":[]}`),
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		panic(err) // static data
	}
	return out.Bytes()
})

// jsonString is s as a JSON string, without Go's HTML escaping of <, > and &.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		panic(err) // a string always encodes
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// BytesJSON returns a Hugging Face tokenizer.json that describes the byte
// tokenizer (a byte-level BPE with the 256 byte symbols as its vocabulary, no
// merges, and the specials as added tokens), so that a model directory written
// with the byte tokenizer loads in transformers. The bytes are canonical: the
// same in every build. Callers must not modify the returned slice.
func BytesJSON() []byte { return bytesJSON() }

var _ Tokenizer = (*Bytes)(nil)
