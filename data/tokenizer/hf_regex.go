package tokenizer

import (
	"fmt"

	"github.com/dlclark/regexp2"
)

// newRegexMatcher compiles a Split pattern. The Rust tokenizers crate runs these
// patterns with Oniguruma (backtracking, look-around, Unicode \s \p{..}); Go's
// regexp has no look-ahead, so the general engine here is regexp2, a backtracking
// engine with .NET semantics that agree with Oniguruma's on what these patterns
// use: leftmost-first alternation, greedy quantifiers with backtracking, (?!…),
// \p{L} \p{N} \p{P} \p{S} \p{M} as Unicode general categories, \s as Unicode
// White_Space (both exclude U+001C–U+001F and U+200B), and (?i) without the
// Unicode special foldings (neither matches "'ſ" with (?i:'s)).
//
// The patterns of the tokenizers this package is tested on also have a hand-written
// scanner (tokenizer_hf_scan.go) that is several times faster; it is used only for
// the exact pattern strings it implements and is tested against regexp2.
// onlyRegexp2 turns the scanners off (the fixture tests run both ways).
func newRegexMatcher(pattern string, onlyRegexp2 bool) (matcher, error) {
	if m := knownScanner(pattern); m != nil && !onlyRegexp2 {
		return m, nil
	}
	return newRegexp2Matcher(pattern)
}

func newRegexp2Matcher(pattern string) (*regexp2Matcher, error) {
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile regex %q: %w", pattern, err)
	}
	return &regexp2Matcher{re: re}, nil
}

// regexp2Matcher runs a pattern with regexp2.
type regexp2Matcher struct {
	re *regexp2.Regexp
}

func (m *regexp2Matcher) matches(s string, fn func(start, end int)) {
	if s == "" {
		return
	}
	// regexp2 works on runes; map rune offsets back to byte offsets.
	runes := []rune(s)
	offs := make([]int, len(runes)+1)
	b := 0
	for i, r := range runes {
		offs[i] = b
		b += runeLen(r)
	}
	offs[len(runes)] = b
	mt, err := m.re.FindRunesMatch(runes)
	for err == nil && mt != nil {
		fn(offs[mt.Index], offs[mt.Index+mt.Length])
		mt, err = m.re.FindNextMatch(mt)
	}
	// err is only a match timeout, and no timeout is set.
}

func runeLen(r rune) int {
	switch {
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3
	}
	return 4
}
