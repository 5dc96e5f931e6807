package tokenizer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"unicode/utf8"
)

// Tokenizer turns text into token ids and back. Implementations are safe for
// concurrent use.
//
// It encodes in three modes that differ only in which added-token strings in the
// text become their own ids (special ones like "<|im_end|>", and the non-special
// ones that some families use for markup, like Qwen's "<think>"):
//
//	Encode       every added token      harness text (chat templates)
//	EncodePlain  non-special ones only  parity with Hugging Face split_special_tokens
//	EncodeText   none                   untrusted text: hints, tool output
//
// None adds BOS/EOS or any other post-processing tokens (a tokenizer.json
// post_processor is ignored): callers that want them add the ids they get from
// SpecialID. Text that is not valid UTF-8 is first made valid by replacing each
// maximal ill-formed subpart with U+FFFD, exactly as Python's
// bytes.decode("utf-8", errors="replace") does.
type Tokenizer interface {
	// Encode returns the ids of text. Added-token strings in text (such as
	// "<|im_end|>") become their own ids, like Hugging Face
	// encode(text, add_special_tokens=False). Use it only on text the harness
	// controls, never on model or tool output.
	Encode(text string) []int32
	// EncodePlain returns the ids of text with special-token strings encoded as
	// ordinary text, exactly as Hugging Face encode_special_tokens=True /
	// split_special_tokens=True does. Added tokens that are not special (Qwen's
	// "<think>", "<tool_call>"; DeepSeek V3's "<｜Assistant｜>") are still matched,
	// so it is not injection-safe for model-visible text: use EncodeText there.
	EncodePlain(text string) []int32
	// EncodeText returns the ids of text with no added token of any kind, special
	// or not, ever matched: every added-token string is encoded as ordinary text,
	// and the result never holds an added token's id (short of a tokenizer whose
	// only id for some byte is an added token's; no supported family has one).
	// This is the injection-safe encoding for teacher hints, tool output and any
	// other untrusted text the model sees. The ids decode to exactly the text
	// (after the tokenizer's own normalizer, such as Qwen's NFC). Hugging Face has
	// no single flag for it: it is split_special_tokens=True with every added token
	// marked special, that is the bare normalizer → pre_tokenizer → model pipeline.
	// On text that holds no added-token string it equals EncodePlain.
	EncodeText(text string) []int32
	// Decode returns the text of ids; special tokens decode to their content.
	// Byte sequences that are not valid UTF-8 decode to U+FFFD per maximal
	// subpart. The error names the first id outside [0, VocabSize()).
	Decode(ids []int32) (string, error)
	// SpecialID returns the id of the special or added token whose content is
	// name, e.g. "<|im_end|>".
	SpecialID(name string) (int32, bool)
	// VocabSize is the number of ids, added and special tokens included: the
	// largest id + 1.
	VocabSize() int
	// Fingerprint identifies the tokenizer in rollout files: "sha256:" + the hex
	// SHA-256 of the tokenizer.json bytes, or "bytes-v1" for the byte tokenizer.
	Fingerprint() string
}

// Load returns the tokenizer that spec names: "bytes" for the embedded
// byte tokenizer, else a path to a tokenizer.json file or to a directory that
// holds one. A tokenizer.json whose bytes equal BytesJSON() loads as the
// byte tokenizer.
func Load(spec string) (Tokenizer, error) {
	if spec == "bytes" {
		return NewBytes(), nil
	}
	path := spec
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	} else if st.IsDir() {
		path = filepath.Join(path, "tokenizer.json")
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	tok, err := ParseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	return tok, nil
}

// ParseJSON returns the tokenizer that the tokenizer.json bytes raw
// describe; bytes equal to BytesJSON() give the byte tokenizer.
func ParseJSON(raw []byte) (Tokenizer, error) {
	if bytes.Equal(raw, BytesJSON()) {
		return NewBytes(), nil
	}
	return parseHF(raw)
}

// CheckFingerprint returns an error when the tokenizer fingerprint want, carried
// by the rollouts of file, differs from got, the model's tokenizer fingerprint.
func CheckFingerprint(file, want, got string) error {
	if want == got {
		return nil
	}
	return fmt.Errorf("check tokenizer of %s: rollouts were tokenized with %q but the model's tokenizer is %q; "+
		"token ids would mean different text, so re-tokenize the rollouts or train the matching model", file, want, got)
}

// Fingerprint returns the fingerprint a tokenizer parsed from the tokenizer.json
// bytes raw would have, without parsing them: BytesFingerprint for the byte
// tokenizer's own file, else the sha256 of the bytes.
func Fingerprint(raw []byte) string {
	if bytes.Equal(raw, BytesJSON()) {
		return BytesFingerprint
	}
	return fingerprintOf(raw)
}

// fingerprintOf is the docs/design.md fingerprint of tokenizer.json bytes.
func fingerprintOf(raw []byte) string {
	sum := sha256.Sum256(raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// validUTF8 returns s with every maximal ill-formed subpart replaced by U+FFFD,
// the "substitution of maximal subparts" practice of Unicode §3.9 that Python's
// errors="replace" and Rust's from_utf8_lossy follow. Valid strings are returned
// as they are, without a copy.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			b = append(b, c)
			i++
			continue
		}
		if r, n := utf8.DecodeRuneInString(s[i:]); r != utf8.RuneError || n > 1 {
			b = append(b, s[i:i+n]...)
			i += n
			continue
		}
		i += maximalSubpart(s, i)
		b = append(b, "\uFFFD"...)
	}
	return string(b)
}

// maximalSubpart returns the length (≥ 1) of the ill-formed sequence at s[i]:
// the longest prefix of a well-formed sequence that starts there, or 1 if s[i]
// cannot start one.
func maximalSubpart(s string, i int) int {
	c := s[i]
	var need int
	lo, hi := byte(0x80), byte(0xBF) // range of the second byte
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c == 0xED:
		need, hi = 2, 0x9F
	case c >= 0xE1 && c <= 0xEF:
		need = 2
	case c == 0xF0:
		need, lo = 3, 0x90
	case c == 0xF4:
		need, hi = 3, 0x8F
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && i+n < len(s); k++ {
		b := s[i+n]
		if k == 0 && (b < lo || b > hi) || k > 0 && (b < 0x80 || b > 0xBF) {
			break
		}
		n++
	}
	return n
}
