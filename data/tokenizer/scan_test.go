package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var knownPatterns = []string{patternQwen, patternLlama3, gpt2Pattern, patternDeepSeekDigits, patternDeepSeekCJK, patternDeepSeek, patternTekken}

func allMatches(m matcher, s string) [][2]int {
	var out [][2]int
	m.matches(s, func(a, b int) { out = append(out, [2]int{a, b}) })
	return out
}

// scanTexts is the fixture corpus plus random strings over tricky runes.
func scanTexts(t *testing.T) []string {
	var texts []string
	for _, c := range readFixtures(t, "qwen3") {
		texts = append(texts, validUTF8(c.input()))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		texts = append(texts, randomTrickyText(rng, 1+rng.IntN(30)))
	}
	return texts
}

var trickyRunes = []rune(" \t\n\r\v\f\u0085\u00a0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000\u200b\x1c\x00" +
	"aAsStTdDmMlLrReEvVſK'''\"0123456789٣४①½.,;:!?-_()[]{}<>|/\\`~@#$%^&*+=€£©®" +
	"éüßñçØÆǅʰ\u0301\u0308\u0323你好世界日本カタひらー한مرحباשלום😀👍🏽\u200d🇩")

func randomTrickyText(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(trickyRunes[rng.IntN(len(trickyRunes))])
	}
	return b.String()
}

func TestScannersMatchRegexp2(t *testing.T) {
	texts := scanTexts(t)
	for _, p := range knownPatterns {
		fast := knownScanner(p)
		require.NotNil(t, fast, p)
		slow, err := newRegexp2Matcher(p)
		require.NoError(t, err)
		for _, s := range texts {
			want, got := allMatches(slow, s), allMatches(fast, s)
			if !slices.Equal(want, got) {
				t.Fatalf("pattern %q on %q:\nregexp2: %v\nscanner: %v", p, s, want, got)
			}
		}
	}
}

// FuzzScannersMatchRegexp2 checks the hand-written scanners against regexp2 on
// arbitrary valid UTF-8.
func FuzzScannersMatchRegexp2(f *testing.F) {
	for _, s := range []string{"", "it's  a\n\n b", "x   ", "\u3000\u3000a", "1234567 ab'RE", "日本語abc!!\n"} {
		f.Add(s)
	}
	type pair struct{ fast, slow matcher }
	var pairs []pair
	for _, p := range knownPatterns {
		slow, err := newRegexp2Matcher(p)
		require.NoError(f, err)
		pairs = append(pairs, pair{knownScanner(p), slow})
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 256 {
			t.Skip("regexp2 backtracks in O(n³) on long whitespace runs")
		}
		s = validUTF8(s)
		for i, p := range pairs {
			want, got := allMatches(p.slow, s), allMatches(p.fast, s)
			if !slices.Equal(want, got) {
				t.Fatalf("pattern %q on %q:\nregexp2: %v\nscanner: %v", knownPatterns[i], s, want, got)
			}
		}
	})
}

// TestRealTokenizersUseScanners makes sure the tested tokenizers' regexes are the
// ones the scanners implement, so the fast path is what the fixtures test.
func TestRealTokenizersUseScanners(t *testing.T) {
	for _, name := range hfNames {
		var doc struct {
			PreTokenizer struct {
				PreTokenizers []struct {
					Type    string `json:"type"`
					Pattern struct {
						Regex string `json:"Regex"`
					} `json:"pattern"`
				} `json:"pretokenizers"`
			} `json:"pre_tokenizer"`
		}
		require.NoError(t, json.Unmarshal(rawTokenizerJSON(t, name), &doc))
		n := 0
		for _, p := range doc.PreTokenizer.PreTokenizers {
			if p.Type == "Split" {
				require.NotNil(t, knownScanner(p.Pattern.Regex), "%s: pattern %q has no scanner", name, p.Pattern.Regex)
				n++
			}
		}
		require.Positive(t, n, name)
	}
}
