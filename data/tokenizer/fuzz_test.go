package tokenizer

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// roundTripNames are the tokenizers without a normalizer, for which
// Decode(EncodePlain(s)) is exactly s (Qwen's NFC normalizer makes it NFC(s):
// TestRoundTripCorpus checks that one).
var roundTripNames = []string{"bytes", "llama3", "deepseek_v3", "mistral_nemo"}

// FuzzTokenizerRoundTrip checks, on any bytes, that encoding never panics, that
// Decode of Encode, EncodePlain and EncodeText gives back s (after ill-formed UTF-8
// is replaced), that EncodeText never yields an added-token id, that the three
// modes agree on text that holds no added-token string, and that decoding
// arbitrary in-range ids gives valid UTF-8.
//
//	go test ./data/ -run '^$' -fuzz '^FuzzTokenizerRoundTrip$' -fuzztime 5s
func FuzzTokenizerRoundTrip(f *testing.F) {
	for _, s := range []string{
		"", "hello world", "It's DON'T they're", "  \n\n\t x   ", "1234567890", "日本語のテキスト", "مرحبا", "שלום",
		"👨‍👩‍👧‍👦 👍🏽 🇩🇪", "e\u0301", "<|im_end|>", "<|eot_id|><|begin_of_text|>", "<｜tool▁sep｜>", "<|hint|>x<|/hint|>",
		"\xff\xfe", "a\xe2\x82b", "\xed\xa0\x80", "func main() {\n\tfmt.Println(\"hi\")\n}\n", "\u3000\u00a0\u2028",
	} {
		f.Add([]byte(s))
	}
	toks := make([]Tokenizer, len(roundTripNames))
	added := make([][]addedTokenJSON, len(roundTripNames))
	addedIDs := make([]map[int32]bool, len(roundTripNames))
	for i, name := range roundTripNames {
		toks[i] = testTokenizer(f, name)
		added[i], addedIDs[i] = addedTokens(f, name)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		s := string(in)
		want := validUTF8(s)
		require.True(t, utf8.ValidString(want))
		if utf8.ValidString(s) {
			require.Equal(t, s, want)
		}
		for i, tok := range toks {
			plain := tok.EncodePlain(s)
			got, err := tok.Decode(plain)
			require.NoError(t, err, roundTripNames[i])
			require.Equal(t, want, got, "%s: Decode(EncodePlain(%q))", roundTripNames[i], s)
			enc := tok.Encode(s)
			got, err = tok.Decode(enc)
			require.NoError(t, err)
			require.Equal(t, want, got, "%s: Decode(Encode(%q))", roundTripNames[i], s)
			text := tok.EncodeText(s)
			got, err = tok.Decode(text)
			require.NoError(t, err)
			require.Equal(t, want, got, "%s: Decode(EncodeText(%q))", roundTripNames[i], s)
			for _, id := range text {
				require.False(t, addedIDs[i][id], "%s: EncodeText(%q) holds added-token id %d", roundTripNames[i], s, id)
			}
			if !slices.ContainsFunc(added[i], func(a addedTokenJSON) bool { return strings.Contains(want, a.Content) }) {
				require.Equal(t, plain, text, "%s: EncodeText(%q) without added-token strings", roundTripNames[i], s)
				require.Equal(t, enc, text, "%s: Encode(%q) without added-token strings", roundTripNames[i], s)
			}

			ids := make([]int32, 0, len(in)/4)
			for j := 0; j+4 <= len(in); j += 4 {
				ids = append(ids, int32(binary.LittleEndian.Uint32(in[j:])%uint32(tok.VocabSize())))
			}
			if got, err := tok.Decode(ids); err == nil {
				require.True(t, utf8.ValidString(got))
			}
		}
	})
}

// TestRoundTripCorpus checks Decode(EncodePlain(s)) and Decode(EncodeText(s)) on
// the fixture corpus for every tokenizer, with Qwen's NFC normalization.
func TestRoundTripCorpus(t *testing.T) {
	for _, name := range append([]string{"bytes"}, hfNames...) {
		tok := testTokenizer(t, name)
		for _, c := range readFixtures(t, name) {
			want := decodedText(name, c.input())
			got, err := tok.Decode(tok.EncodePlain(c.input()))
			require.NoError(t, err)
			require.Equal(t, want, got, "%s: EncodePlain(%q)", name, c.input())
			got, err = tok.Decode(tok.EncodeText(c.input()))
			require.NoError(t, err)
			require.Equal(t, want, got, "%s: EncodeText(%q)", name, c.input())
		}
	}
}
