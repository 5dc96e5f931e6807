package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder is a tokenizer.json "decoder": it turns the tokens of ids into text, as
// the Rust Decoder::decode_chain does (each step maps a list of strings to a list
// of strings; the result is their concatenation).
type decoder interface {
	decode(toks []string) []string
}

// byteLevelDecoder maps ByteLevel symbols back to bytes; the bytes of all tokens
// are then read as UTF-8, ill-formed parts becoming U+FFFD.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decode(toks []string) []string {
	var b []byte
	for _, t := range toks {
		b = byteLevelTokenBytes(b, t)
	}
	return []string{validUTF8(string(b))}
}

type sequenceDecoder []decoder

func (q sequenceDecoder) decode(toks []string) []string {
	for _, d := range q {
		toks = d.decode(toks)
	}
	return toks
}

// replaceDecoder replaces a fixed string in every token.
type replaceDecoder struct{ old, new string }

func (r replaceDecoder) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		out[i] = strings.ReplaceAll(t, r.old, r.new)
	}
	return out
}

// fuseDecoder joins all tokens into one.
type fuseDecoder struct{}

func (fuseDecoder) decode(toks []string) []string { return []string{strings.Join(toks, "")} }

// stripDecoder removes up to start leading and stop trailing copies of content
// from every token.
type stripDecoder struct {
	content     string
	start, stop int
}

func (s stripDecoder) decode(toks []string) []string {
	out := make([]string, len(toks))
	for i, t := range toks {
		for k := 0; k < s.start && strings.HasPrefix(t, s.content); k++ {
			t = t[len(s.content):]
		}
		for k := 0; k < s.stop && strings.HasSuffix(t, s.content); k++ {
			t = t[:len(t)-len(s.content)]
		}
		out[i] = t
	}
	return out
}

// byteFallbackDecoder turns runs of "<0xXX>" tokens into the text of their bytes,
// one U+FFFD per byte when the run is not valid UTF-8.
type byteFallbackDecoder struct{}

func (byteFallbackDecoder) decode(toks []string) []string {
	var out []string
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			out = append(out, strings.Repeat("\uFFFD", len(pending)))
		}
		pending = pending[:0]
	}
	for _, t := range toks {
		if len(t) == 6 && strings.HasPrefix(t, "<0x") && t[5] == '>' {
			if b, err := strconv.ParseUint(t[3:5], 16, 8); err == nil {
				pending = append(pending, byte(b))
				continue
			}
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// parseDecoder reads the decoder at path; null gives nil.
func parseDecoder(raw json.RawMessage, path string) (decoder, error) {
	typ, err := jsonType(raw, path)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "":
		return nil, nil
	case "ByteLevel":
		return byteLevelDecoder{}, nil // its options only concern offsets
	case "Fuse":
		return fuseDecoder{}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Strip":
		var v struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		return stripDecoder{v.Content, v.Start, v.Stop}, nil
	case "Replace":
		var v struct {
			Pattern struct {
				String *string `json:"String"`
			} `json:"pattern"`
			Content string `json:"content"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("parse %s: %w", path, err)
		}
		if v.Pattern.String == nil || *v.Pattern.String == "" {
			return nil, unsupported(path+".pattern", "Replace decoder pattern (only a non-empty String)")
		}
		return replaceDecoder{*v.Pattern.String, v.Content}, nil
	case "Sequence":
		seq, err := parseSequence(raw, path, "decoders", parseDecoder)
		if err != nil {
			return nil, err
		}
		if len(seq) == 1 {
			return seq[0], nil
		}
		return sequenceDecoder(seq), nil
	}
	return nil, unsupported(path, fmt.Sprintf("decoder type %q (supported: ByteLevel, Sequence, Replace, ByteFallback, Fuse, Strip)", typ))
}
