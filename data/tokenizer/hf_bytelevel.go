package tokenizer

import "unicode/utf8"

// byteToRune is GPT-2's ByteLevel alphabet: printable bytes stand for themselves,
// the others are moved to U+0100 and up, so that every byte is a visible symbol.
// runeToByte is its inverse.
var byteToRune, runeToByte = byteLevelAlphabet()

func byteLevelAlphabet() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := make(map[rune]byte, 256)
	n := rune(0)
	for b := range 256 {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}

// byteLevelString maps raw bytes to their ByteLevel symbols, the form in which
// tokenizer.json spells byte-level tokens.
func byteLevelString(raw string) string {
	b := make([]byte, 0, 2*len(raw))
	for i := 0; i < len(raw); i++ {
		b = utf8.AppendRune(b, byteToRune[raw[i]])
	}
	return string(b)
}

// byteLevelTokenBytes appends the bytes that the ByteLevel decoder gives for one
// token: the bytes of its symbols, or the token's own UTF-8 when a character is
// not a ByteLevel symbol (as for special tokens like "<｜end▁of▁sentence｜>").
func byteLevelTokenBytes(dst []byte, tok string) []byte {
	start := len(dst)
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return append(dst[:start], tok...)
		}
		dst = append(dst, b)
	}
	return dst
}

// isByteLevelSpelling reports whether every character of tok is a ByteLevel symbol,
// so that some bytes spell it.
func isByteLevelSpelling(tok string) bool {
	for _, r := range tok {
		if _, ok := runeToByte[r]; !ok {
			return false
		}
	}
	return true
}
