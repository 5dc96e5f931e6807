package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/text/unicode/norm"
)

var updateTokenizers = flag.Bool("update-tokenizers", false, "rewrite testdata/tokenizers/bytes/tokenizer.json")

const tokDir = "testdata/tokenizers"

// hfNames are the real tokenizers in testdata/tokenizers (gzipped tokenizer.json).
var hfNames = []string{"qwen3", "llama3", "deepseek_v3", "mistral_nemo"}

var (
	rawCache sync.Map // name → []byte
	tokCache sync.Map // name → Tokenizer
)

// rawTokenizerJSON returns the bytes of testdata/tokenizers/<name>/tokenizer.json
// (gunzipped when stored as tokenizer.json.gz).
func rawTokenizerJSON(t testing.TB, name string) []byte {
	t.Helper()
	if v, ok := rawCache.Load(name); ok {
		return v.([]byte)
	}
	dir := filepath.Join(tokDir, name)
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if os.IsNotExist(err) {
		f, ferr := os.Open(filepath.Join(dir, "tokenizer.json.gz"))
		require.NoError(t, ferr)
		defer f.Close()
		zr, zerr := gzip.NewReader(f)
		require.NoError(t, zerr)
		raw, err = io.ReadAll(zr)
	}
	require.NoError(t, err)
	rawCache.Store(name, raw)
	return raw
}

// testTokenizer loads a testdata tokenizer once per test binary.
func testTokenizer(t testing.TB, name string) Tokenizer {
	t.Helper()
	if v, ok := tokCache.Load(name); ok {
		return v.(Tokenizer)
	}
	var tok Tokenizer
	if name == "bytes" {
		tok = NewBytes()
	} else {
		var err error
		tok, err = ParseJSON(rawTokenizerJSON(t, name))
		require.NoError(t, err)
	}
	tokCache.Store(name, tok)
	return tok
}

type fixtureCase struct {
	Text     *string `json:"text"`
	Bytes    []byte  `json:"bytes"` // base64 in JSON: ill-formed UTF-8 input
	IDs      []int32 `json:"ids"`
	IDsPlain []int32 `json:"ids_plain"`
	Decoded  string  `json:"decoded"`
}

func (c fixtureCase) input() string {
	if c.Text != nil {
		return *c.Text
	}
	return string(c.Bytes)
}

func readFixtures(t *testing.T, name string) []fixtureCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(tokDir, name, "fixtures.json"))
	require.NoError(t, err)
	var doc struct {
		Cases []fixtureCase `json:"cases"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.NotEmpty(t, doc.Cases)
	return doc.Cases
}

// idsDiff describes the first difference of two id lists with a few ids of context
// on each side, or returns "".
func idsDiff(want, got []int32) string {
	if slices.Equal(want, got) {
		return ""
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	lo := max(0, i-3)
	win := func(s []int32) []int32 { return s[lo:min(len(s), i+6)] }
	return fmt.Sprintf("first difference at index %d (lengths want %d, got %d)\n  want[%d:]: %v\n  got[%d:]:  %v",
		i, len(want), len(got), lo, win(want), lo, win(got))
}

func TestTokenizerFixtures(t *testing.T) {
	for _, name := range append([]string{"bytes"}, hfNames...) {
		t.Run(name, func(t *testing.T) {
			tok := testTokenizer(t, name)
			toks := map[string]Tokenizer{name: tok}
			if name == "bytes" {
				// The Hugging Face loader on BytesJSON must agree too.
				hf, err := parseHF(BytesJSON())
				require.NoError(t, err)
				toks["bytes-as-hf"] = hf
			} else {
				// The regexp2 engine alone must agree with the Rust crate too.
				slow, err := parseHFWith(rawTokenizerJSON(t, name), true)
				require.NoError(t, err)
				toks[name+"-regexp2"] = slow
			}
			cases := readFixtures(t, name)
			for tname, tok := range toks {
				failed := 0
				for i, c := range cases {
					in := c.input()
					var msgs []string
					if d := idsDiff(c.IDs, tok.Encode(in)); d != "" {
						msgs = append(msgs, "Encode: "+d)
					}
					if d := idsDiff(c.IDsPlain, tok.EncodePlain(in)); d != "" {
						msgs = append(msgs, "EncodePlain: "+d)
					}
					if got, err := tok.Decode(c.IDs); err != nil || got != c.Decoded {
						msgs = append(msgs, fmt.Sprintf("Decode: want %q, got %q (err %v)", c.Decoded, got, err))
					}
					if len(msgs) > 0 {
						failed++
						if failed <= 10 {
							t.Errorf("%s case %d, text %q:\n%s", tname, i, in, strings.Join(msgs, "\n"))
						}
					}
				}
				if failed > 0 {
					t.Errorf("%s: %d of %d fixture cases differ", tname, failed, len(cases))
				}
			}
		})
	}
}

func TestBytesJSONGolden(t *testing.T) {
	path := filepath.Join(tokDir, "bytes", "tokenizer.json")
	if *updateTokenizers {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, BytesJSON(), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), string(BytesJSON()), "run go test ./data/ -run TestBytesJSONGolden -update-tokenizers")

	tok, err := Load(path)
	require.NoError(t, err)
	require.IsType(t, &Bytes{}, tok)
	require.Equal(t, BytesFingerprint, tok.Fingerprint())
}

func TestBytesTokenizer(t *testing.T) {
	tok := NewBytes()
	require.Equal(t, BytesVocabSize, tok.VocabSize())
	require.Equal(t, 265, BytesVocabSize)
	for i, s := range bytesSpecials {
		id, ok := tok.SpecialID(s)
		require.True(t, ok, s)
		require.Equal(t, int32(256+i), id)
	}
	require.Equal(t, BytesEnd, int32(264))
	_, ok := tok.SpecialID("<|im_end|>")
	require.False(t, ok)

	in := "a<|user|>é<|<|end|>"
	require.Equal(t, []int32{'a', BytesUser, 0xC3, 0xA9, '<', '|', BytesEnd}, tok.Encode(in))
	require.Len(t, tok.EncodePlain(in), len(in))
	got, err := tok.Decode(tok.Encode(in))
	require.NoError(t, err)
	require.Equal(t, in, got)

	_, err = tok.Decode([]int32{'a', 265})
	require.ErrorContains(t, err, "id 265 at position 1")
	_, err = tok.Decode([]int32{-1})
	require.ErrorContains(t, err, "id -1 at position 0")
	got, err = tok.Decode([]int32{'a', 0xE2, 0x82, 'b'})
	require.NoError(t, err)
	require.Equal(t, "a\uFFFDb", got)
}

func TestValidUTF8MatchesPython(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(tokDir, "utf8_replace.json"))
	require.NoError(t, err)
	var cases []struct {
		Bytes []byte `json:"bytes"`
		Text  string `json:"text"`
	}
	require.NoError(t, json.Unmarshal(raw, &cases))
	require.NotEmpty(t, cases)
	for _, c := range cases {
		require.Equal(t, c.Text, validUTF8(string(c.Bytes)), "bytes %x", c.Bytes)
	}
	s := "valid ✓"
	require.Equal(t, s, validUTF8(s))
}

// injections are strings that a tool or a teacher could smuggle into a hint.
var injections = []string{
	"<|im_end|>", "<|im_start|>", "<|endoftext|>", "<|eot_id|>", "<|begin_of_text|>",
	"<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>",
	"<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<|hint|>", "<|/hint|>",
	"<|end|>", "<|user|>", "<|system|>", "<|assistant|>", "<|tool|>", "<|bos|>", "<|eos|>",
	"[INST]", "[/INST]", "</s>", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
}

// specialIDs returns the ids of the tokenizer's special tokens.
func specialIDs(t *testing.T, name string) map[int32]string {
	t.Helper()
	out := map[int32]string{}
	if name == "bytes" {
		for i, s := range bytesSpecials {
			out[int32(256+i)] = s
		}
		return out
	}
	var doc tokenizerJSON
	require.NoError(t, json.Unmarshal(rawTokenizerJSON(t, name), &doc))
	for _, a := range doc.AddedTokens {
		if a.Special {
			out[a.ID] = a.Content
		}
	}
	require.NotEmpty(t, out)
	return out
}

// TestEncodePlainNeverGivesSpecialID checks that EncodePlain keeps special tokens
// out (non-special added tokens are TestEncodeTextNoAddedToken's business).
func TestEncodePlainNeverGivesSpecialID(t *testing.T) {
	for _, name := range append([]string{"bytes"}, hfNames...) {
		t.Run(name, func(t *testing.T) {
			tok := testTokenizer(t, name)
			specials := specialIDs(t, name)
			matched := 0
			for _, inj := range injections {
				for _, text := range []string{inj, "tool says: " + inj + " now", inj + inj, "<" + inj + ">", "\n" + inj + "\n\nHint: " + inj} {
					for _, id := range tok.EncodePlain(text) {
						if s, ok := specials[id]; ok {
							t.Errorf("EncodePlain(%q) produced special id %d (%q)", text, id, s)
						}
					}
				}
				id, ok := tok.SpecialID(inj)
				if !ok {
					continue
				}
				if _, special := specials[id]; !special {
					continue
				}
				matched++
				require.Equal(t, []int32{id}, tok.Encode(inj), "Encode(%q)", inj)
				require.Contains(t, tok.Encode("x "+inj+" y"), id, "Encode must produce the special id")
				got, err := tok.Decode(tok.EncodePlain(inj))
				require.NoError(t, err)
				require.Equal(t, inj, got, "plain encoding decodes back to the text")
			}
			require.Positive(t, matched, "no injection string is special in %s", name)
			// Every special token of the tokenizer, not only the listed ones.
			for id, s := range specials {
				for _, got := range tok.EncodePlain("a " + s + " b") {
					require.NotContains(t, specials, got, "EncodePlain of special %q (id %d)", s, id)
				}
			}
		})
	}
}

func TestHFTokenizerBasics(t *testing.T) {
	for _, tc := range []struct {
		name, fingerprint, special string
		specialID                  int32
		vocab                      int
	}{
		{"qwen3", "sha256:aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4", "<|im_end|>", 151645, 151669},
		{"llama3", "sha256:e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7", "<|eot_id|>", 128009, 128256},
		{"deepseek_v3", "sha256:621ac2e32d0dba658404412318818aaa8ce8cda492e59830109d8da6b517fb41", "<｜end▁of▁sentence｜>", 1, 128815},
		{"mistral_nemo", "sha256:e11c71726323d33da7b8d6f6f269f1988931c0a52b7122bcdd8c05042974e0db", "</s>", 2, 131072},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := testTokenizer(t, tc.name)
			require.Equal(t, tc.fingerprint, tok.Fingerprint())
			require.Equal(t, tc.vocab, tok.VocabSize())
			id, ok := tok.SpecialID(tc.special)
			require.True(t, ok)
			require.Equal(t, tc.specialID, id)
			_, ok = tok.SpecialID("<|no such token|>")
			require.False(t, ok)

			_, err := tok.Decode([]int32{1, 2, int32(tc.vocab)})
			require.ErrorContains(t, err, fmt.Sprintf("id %d at position 2", tc.vocab))
			_, err = tok.Decode([]int32{-5})
			require.ErrorContains(t, err, "id -5 at position 0")
			require.Empty(t, tok.Encode(""))
		})
	}
}

func TestLoadTokenizer(t *testing.T) {
	tok, err := Load("bytes")
	require.NoError(t, err)
	require.Equal(t, BytesFingerprint, tok.Fingerprint())

	dir := t.TempDir()
	raw := rawTokenizerJSON(t, "qwen3")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644))
	for _, spec := range []string{dir, filepath.Join(dir, "tokenizer.json")} {
		tok, err := Load(spec)
		require.NoError(t, err, spec)
		require.Equal(t, fingerprintOf(raw), tok.Fingerprint())
	}

	_, err = Load(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "load tokenizer")
	_, err = Load(t.TempDir())
	require.ErrorContains(t, err, "tokenizer.json")

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte("{not json"), 0o644))
	_, err = Load(bad)
	require.ErrorContains(t, err, "bad.json")
	require.ErrorContains(t, err, "parse tokenizer.json")
}

// TestHFUnsupported checks that features this package does not implement fail at
// load with the JSON path of the feature.
func TestHFUnsupported(t *testing.T) {
	var base map[string]any
	require.NoError(t, json.Unmarshal(BytesJSON(), &base))
	for _, tc := range []struct {
		name, path string
		value      any
		want       string
	}{
		{"normalizer", "normalizer", map[string]any{"type": "Precompiled"}, `normalizer: unsupported normalizer type "Precompiled"`},
		{"nested normalizer", "normalizer", map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "StripAccents"}}}, `normalizer.normalizers[1]: unsupported normalizer type "StripAccents"`},
		{"pre-tokenizer", "pre_tokenizer", map[string]any{"type": "Metaspace"}, `pre_tokenizer: unsupported pre-tokenizer type "Metaspace"`},
		{"no byte level", "pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{}}, "no ByteLevel step"},
		{"split behavior", "pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "a"}, "behavior": "Sideways"},
			map[string]any{"type": "ByteLevel"}}}, `pre_tokenizer.pretokenizers[0].behavior: unsupported split behavior "Sideways"`},
		{"bad regex", "pre_tokenizer", map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(a"}, "behavior": "Isolated"},
			map[string]any{"type": "ByteLevel"}}}, `pre_tokenizer.pretokenizers[0].pattern.Regex: compile regex`},
		{"decoder", "decoder", map[string]any{"type": "WordPiece"}, `decoder: unsupported decoder type "WordPiece"`},
		{"model", "model", map[string]any{"type": "Unigram"}, `model.type: unsupported model type "Unigram"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := map[string]any{}
			for k, v := range base {
				doc[k] = v
			}
			doc[tc.path] = tc.value
			raw, err := json.Marshal(doc)
			require.NoError(t, err)
			_, err = ParseJSON(raw)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCheckFingerprint(t *testing.T) {
	require.NoError(t, CheckFingerprint("a.arrow", "bytes-v1", "bytes-v1"))
	err := CheckFingerprint("spool/a.arrow", "bytes-v1", "sha256:ab")
	require.ErrorContains(t, err, "spool/a.arrow")
	require.ErrorContains(t, err, `"bytes-v1"`)
	require.ErrorContains(t, err, `"sha256:ab"`)
}

func TestBPEMergeHeapMatchesScan(t *testing.T) {
	m := testTokenizer(t, "llama3").(*hfTokenizer).model
	words := []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", strings.Repeat(" ", 100),
		strings.Repeat("ab", 70), "internationalization-and-localization-of-software-products-at-scale",
		strings.Repeat("日本語", 30), strings.Repeat("😀👍🏽", 20)}
	for _, w := range words {
		syms := make([]int32, len(w))
		for i := range len(w) {
			syms[i] = m.byteIDs[w[i]]
		}
		a := slices.Clone(syms)
		b := slices.Clone(syms)
		require.Equal(t, a[:m.mergeSmall(a)], b[:m.mergeHeap(b)], "word %q", w)
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteToRune[b]
		require.False(t, seen[r])
		seen[r] = true
		require.Equal(t, byte(b), runeToByte[r])
	}
	require.Equal(t, 'Ġ', byteToRune[' '])
	require.Equal(t, 'Ċ', byteToRune['\n'])
	require.Equal(t, "ĠhelloĊ", byteLevelString(" hello\n"))
	require.True(t, bytes.Equal([]byte(" hello\n"), byteLevelTokenBytes(nil, "ĠhelloĊ")))
}

func TestBase64FixtureDecoding(t *testing.T) {
	// The fixtures keep ill-formed UTF-8 as base64 "bytes"; make sure that decodes.
	var c fixtureCase
	require.NoError(t, json.Unmarshal([]byte(`{"bytes":"`+base64.StdEncoding.EncodeToString([]byte{0xff})+`"}`), &c))
	require.Equal(t, "\xff", c.input())
}

func TestConcurrentEncode(t *testing.T) {
	tok := testTokenizer(t, "qwen3")
	text := mixedText(64 << 10)
	want := tok.EncodePlain(text)
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 4 {
		wg.Go(func() {
			for range 3 {
				if got := tok.EncodePlain(text); !slices.Equal(want, got) {
					errs <- idsDiff(want, got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestSplitBehaviors checks the Split behaviors and Digits against the Rust crate's
// pre_tokenize_str on "the-final--countdown-".
func TestSplitBehaviors(t *testing.T) {
	const s = "the-final--countdown-"
	for _, tc := range []struct {
		behavior     string
		want, invert []string
	}{
		{"Removed", []string{"the", "final", "countdown"}, []string{"-", "-", "-", "-"}},
		{"Isolated", []string{"the", "-", "final", "-", "-", "countdown", "-"}, []string{"the", "-", "final", "-", "-", "countdown", "-"}},
		{"MergedWithPrevious", []string{"the-", "final-", "-", "countdown-"}, []string{"the", "-final", "-", "-countdown", "-"}},
		{"MergedWithNext", []string{"the", "-final", "-", "-countdown", "-"}, []string{"the-", "final-", "-", "countdown-"}},
		{"Contiguous", []string{"the", "-", "final", "--", "countdown", "-"}, []string{"the", "-", "final", "--", "countdown", "-"}},
	} {
		for _, invert := range []bool{false, true} {
			raw := fmt.Sprintf(`{"type":"Split","pattern":{"String":"-"},"behavior":%q,"invert":%v}`, tc.behavior, invert)
			st, err := parseSplit(json.RawMessage(raw), "pre_tokenizer", false)
			require.NoError(t, err)
			var got []string
			st.split(s, func(p string) { got = append(got, p) })
			want := tc.want
			if invert {
				want = tc.invert
			}
			require.Equal(t, want, got, "%s invert=%v", tc.behavior, invert)
		}
	}
	for _, tc := range []struct {
		individual bool
		want       []string
	}{{true, []string{"ab", "1", "2", "3", "c", "4", "5"}}, {false, []string{"ab", "123", "c", "45"}}} {
		p := &preTokenizer{}
		require.NoError(t, p.add(json.RawMessage(fmt.Sprintf(`{"type":"Digits","individual_digits":%v}`, tc.individual)), "pre_tokenizer"))
		var got []string
		p.steps[0].split("ab123c45", func(s string) { got = append(got, s) })
		require.Equal(t, tc.want, got)
	}
}

// addedTokens returns the added_tokens of testdata/tokenizers/<name>/tokenizer.json
// and the set of their ids.
func addedTokens(t testing.TB, name string) ([]addedTokenJSON, map[int32]bool) {
	t.Helper()
	var doc tokenizerJSON
	require.NoError(t, json.Unmarshal(rawTokenizerJSON(t, name), &doc))
	require.NotEmpty(t, doc.AddedTokens)
	ids := make(map[int32]bool, len(doc.AddedTokens))
	for _, a := range doc.AddedTokens {
		ids[a.ID] = true
	}
	return doc.AddedTokens, ids
}

// decodedText is what Decode(EncodePlain(s)) gives on tokenizer name: s with
// ill-formed UTF-8 replaced, and NFC for Qwen's normalizer.
func decodedText(name, s string) string {
	s = validUTF8(s)
	if name == "qwen3" {
		s = norm.NFC.String(s)
	}
	return s
}

// TestEncodeTextNoAddedToken checks, for every added token of every tokenizer,
// special or not, that EncodeText of its content alone, embedded in text, glued to
// itself and wrapped in brackets yields no added-token id and decodes back to the
// text, while Encode matches it and EncodePlain matches the non-special ones.
func TestEncodeTextNoAddedToken(t *testing.T) {
	for _, name := range append([]string{"bytes"}, hfNames...) {
		t.Run(name, func(t *testing.T) {
			tok := testTokenizer(t, name)
			added, addedIDs := addedTokens(t, name)
			check := func(text string) {
				t.Helper()
				ids := tok.EncodeText(text)
				for _, id := range ids {
					if addedIDs[id] {
						t.Fatalf("EncodeText(%q) = %v holds added-token id %d", text, ids, id)
					}
				}
				got, err := tok.Decode(ids)
				require.NoError(t, err)
				require.Equal(t, decodedText(name, text), got, "Decode(EncodeText(%q))", text)
			}
			nonSpecial := 0
			var all strings.Builder
			for _, a := range added {
				c := a.Content
				all.WriteString(c)
				for _, text := range []string{c, "a " + c + " b", c + c, "<" + c + ">", "x" + c + "y", "\n" + c + "\n\nHint: " + c} {
					check(text)
				}
				require.Equal(t, []int32{a.ID}, tok.Encode(c), "Encode(%q)", c)
				if !a.Special {
					nonSpecial++
					require.Equal(t, []int32{a.ID}, tok.EncodePlain(c), "EncodePlain(%q) matches a non-special added token", c)
				}
			}
			check(all.String())
			if name == "qwen3" || name == "deepseek_v3" {
				require.Positive(t, nonSpecial, "%s has non-special added tokens", name)
			}
		})
	}
}

// TestEncodeTextEqualsPlain checks that EncodeText equals EncodePlain (and the Rust
// crate's ids_plain) on every fixture text that holds no added-token string.
func TestEncodeTextEqualsPlain(t *testing.T) {
	for _, name := range append([]string{"bytes"}, hfNames...) {
		t.Run(name, func(t *testing.T) {
			tok := testTokenizer(t, name)
			added, _ := addedTokens(t, name)
			cases := readFixtures(t, name)
			compared := 0
			for _, c := range cases {
				in := c.input()
				if slices.ContainsFunc(added, func(a addedTokenJSON) bool {
					return strings.Contains(in, a.Content) || strings.Contains(decodedText(name, in), a.Content)
				}) {
					continue
				}
				compared++
				if d := idsDiff(c.IDsPlain, tok.EncodeText(in)); d != "" {
					t.Errorf("EncodeText(%q): %s", in, d)
				}
			}
			require.Greater(t, compared, len(cases)/2, "most fixture texts hold no added-token string")
		})
	}
}

// TestEncodeTextModelNeverGivesAddedID checks a tokenizer whose BPE merges reach
// added-token ids: "ab" (id 300) is both a merge result and a non-special added
// token, and id 303 is the merge result "ef" in the model but the added token
// "<x>". EncodeText must spell both from smaller pieces, with and without
// ignore_merges.
func TestEncodeTextModelNeverGivesAddedID(t *testing.T) {
	for _, ignoreMerges := range []bool{false, true} {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(BytesJSON(), &doc))
		model := doc["model"].(map[string]any)
		vocab := model["vocab"].(map[string]any)
		for tok, id := range map[string]int{"ab": 300, "cd": 301, "abcd": 302, "ef": 303} {
			vocab[tok] = id
		}
		model["merges"] = []string{"a b", "c d", "ab cd", "e f"}
		model["ignore_merges"] = ignoreMerges
		doc["added_tokens"] = append(doc["added_tokens"].([]any),
			map[string]any{"id": 300, "content": "ab", "special": false},
			map[string]any{"id": 303, "content": "<x>", "special": true})
		raw, err := json.Marshal(doc)
		require.NoError(t, err)
		tok, err := parseHF(raw)
		require.NoError(t, err)

		require.Equal(t, []int32{300}, tok.Encode("ab"))
		require.Equal(t, []int32{300}, tok.EncodePlain("ab"), "Hugging Face matches the non-special added token")
		require.Equal(t, []int32{'a', 'b'}, tok.EncodeText("ab"))
		wantABCD := []int32{'a', 'b', 301} // no merge through the added id
		if ignoreMerges {
			wantABCD = []int32{302} // the word is a vocabulary entry that is not added
		}
		require.Equal(t, wantABCD, tok.EncodeText("abcd"))
		require.Equal(t, []int32{'e', 'f'}, tok.EncodeText("ef"), "id 303 would decode as <x>")
		require.Equal(t, []int32{'<', 'x', '>'}, tok.EncodeText("<x>"))
		require.Equal(t, []int32{301}, tok.EncodeText("cd"))
		require.Equal(t, tok.model.encodeWord(nil, "cd"), tok.textModel.encodeWord(nil, "cd"))
		for _, s := range []string{"ab", "abcd", "ef", "<x>", "xxabcdefab<x>"} {
			got, err := tok.Decode(tok.EncodeText(s))
			require.NoError(t, err)
			require.Equal(t, s, got)
		}
	}
}

// TestAddedIDsInModelVocab records how the fixture tokenizers' added tokens overlap
// their BPE models. Qwen3 and Llama 3: not at all. DeepSeek V3: ids 0–2 are in both,
// spelled outside the ByteLevel alphabet, so EncodeText uses the model itself.
// Mistral-Nemo: all 1000 added tokens (ids 0–999: <unk>, <s>, [INST], <SPECIAL_…>)
// are vocabulary entries spelled in the ByteLevel alphabet, which its ignore_merges
// lookup could give for a whole pre-token, so EncodeText uses a model without them.
// No merge of any of them yields an added id.
func TestAddedIDsInModelVocab(t *testing.T) {
	for _, name := range hfNames {
		tok := testTokenizer(t, name).(*hfTokenizer)
		added, _ := addedTokens(t, name)
		var both []int32
		spelled, entries := 0, 0
		for _, a := range added {
			if int(a.ID) < len(tok.model.idToToken) && tok.model.hasID[a.ID] {
				both = append(both, a.ID)
				if isByteLevelSpelling(tok.model.idToToken[a.ID]) {
					spelled++
				}
			}
			if _, ok := tok.model.vocab[byteLevelString(a.Content)]; ok {
				entries++
			}
		}
		ids := map[int32]bool{}
		for _, a := range added {
			ids[a.ID] = true
		}
		for _, mg := range tok.model.merges {
			require.False(t, ids[mg.id], "%s: a merge yields added id %d", name, mg.id)
		}
		switch name {
		case "deepseek_v3":
			require.Equal(t, []int32{0, 1, 2}, both)
			require.Zero(t, spelled+entries)
			require.True(t, tok.model == tok.textModel)
		case "mistral_nemo":
			require.Len(t, both, 1000)
			require.Equal(t, int32(0), slices.Min(both))
			require.Equal(t, int32(999), slices.Max(both))
			require.Equal(t, 1000, spelled)
			require.Equal(t, 1000, entries)
			require.False(t, tok.model == tok.textModel, "EncodeText needs the model without the added ids")
		default:
			require.Empty(t, both, name)
			require.Zero(t, entries, name)
			require.True(t, tok.model == tok.textModel, name)
		}
	}
}
