package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written scanners for the Split regexes of the tokenizers we train (and
// GPT-2's ByteLevel regex). Each one walks the alternatives of its pattern in
// order, resolving greedy quantifiers and the look-ahead as a backtracking engine
// would, and is several times faster than regexp2. They are used only for the exact
// pattern strings below; TestScannersMatchRegexp2 and FuzzScannersMatchRegexp2
// check them against regexp2 on the fixture corpus and on random text.
//
// Character classes, as Oniguruma (and regexp2) read them: \s is Unicode
// White_Space (unicode.IsSpace), \p{L} \p{N} \p{P} \p{S} \p{M} are Unicode general
// categories.
const (
	// Qwen 2 / 2.5 / 3: one digit per pre-token.
	patternQwen = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// Llama 3 (and GPT-4's cl100k): up to three digits per pre-token.
	patternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// DeepSeek V3: digits and CJK are split off first by the two patterns before.
	patternDeepSeekDigits = `\p{N}{1,3}`
	patternDeepSeekCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patternDeepSeek       = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
	// Mistral-Nemo (Tekken): words split at case changes, single digits.
	patternTekken = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// knownScanner returns the hand-written matcher for pattern, or nil.
func knownScanner(pattern string) matcher {
	switch pattern {
	case patternQwen:
		return scanFunc(func(s string, i int) int { return scanGPT4(s, i, 1, true) })
	case patternLlama3:
		return scanFunc(func(s string, i int) int { return scanGPT4(s, i, 3, true) })
	case gpt2Pattern:
		return scanFunc(scanGPT2)
	case patternDeepSeekDigits:
		return newRunMatcher(isN, 3)
	case patternDeepSeekCJK:
		return newRunMatcher(isDeepSeekCJK, 0)
	case patternDeepSeek:
		return scanFunc(scanDeepSeek)
	case patternTekken:
		return scanFunc(scanTekken)
	}
	return nil
}

// scanFunc is a matcher from a function that returns the end of the match that
// starts at s[i], or i when none does.
type scanFunc func(s string, i int) int

func (f scanFunc) matches(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		if e := f(s, i); e > i {
			fn(i, e)
			i = e
			continue
		}
		_, n := decodeAt(s, i)
		i += n
	}
}

// runMatcher matches runs of the runes in a class, at most limit runes a match (0:
// no limit): \p{N}{1,3} or [...]+.
type runMatcher struct {
	in    func(rune) bool
	ascii [utf8.RuneSelf]bool // in, for ASCII
	limit int
}

func newRunMatcher(in func(rune) bool, limit int) *runMatcher {
	m := &runMatcher{in: in, limit: limit}
	for r := range rune(utf8.RuneSelf) {
		m.ascii[r] = in(r)
	}
	return m
}

func (m *runMatcher) has(s string, i int) (bool, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return m.ascii[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return m.in(r), n
}

func (m *runMatcher) matches(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		ok, n := m.has(s, i)
		if !ok {
			i += n
			continue
		}
		start, k := i, 1
		i += n
		for i < len(s) && (m.limit == 0 || k < m.limit) {
			ok, n := m.has(s, i)
			if !ok {
				break
			}
			i += n
			k++
		}
		fn(start, i)
	}
}

func decodeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// peek returns the rune at s[i], or -1 at the end.
func peek(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	return decodeAt(s, i)
}

func isL(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r)
}

func isN(r rune) bool {
	if r < utf8.RuneSelf {
		return '0' <= r && r <= '9'
	}
	return unicode.IsNumber(r)
}

func isS(r rune) bool {
	if r < utf8.RuneSelf {
		return r == ' ' || '\t' <= r && r <= '\r'
	}
	return unicode.IsSpace(r)
}

func isNL(r rune) bool { return r == '\r' || r == '\n' }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) }

// isPS is [\p{P}\p{S}].
func isPS(r rune) bool {
	if r < utf8.RuneSelf {
		return r >= 0 && asciiPS[r]
	}
	return unicode.IsPunct(r) || unicode.IsSymbol(r)
}

var asciiPS = func() (t [utf8.RuneSelf]bool) {
	for r := range rune(utf8.RuneSelf) {
		t[r] = unicode.IsPunct(r) || unicode.IsSymbol(r)
	}
	return t
}()

func isDeepSeekCJK(r rune) bool {
	return 0x4e00 <= r && r <= 0x9fa5 || 0x3040 <= r && r <= 0x309f || 0x30a0 <= r && r <= 0x30ff
}

// scanRun matches a run of runes for which in is true, at most limit runes (0: no
// limit).
func scanRun(s string, i, limit int, in func(rune) bool) int {
	j := i
	for k := 0; limit == 0 || k < limit; k++ {
		r, n := peek(s, j)
		if r < 0 || !in(r) {
			break
		}
		j += n
	}
	return j
}

// scanContraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d), or its lower-case-only form
// without fold, at the apostrophe s[i].
func scanContraction(s string, i int, fold bool) int {
	if i+1 >= len(s) {
		return i
	}
	lower := func(c byte) byte {
		if fold && 'A' <= c && c <= 'Z' {
			return c + 'a' - 'A'
		}
		return c
	}
	switch lower(s[i+1]) {
	case 's', 't', 'm', 'd':
		return i + 2
	case 'r', 'v':
		if i+2 < len(s) && lower(s[i+2]) == 'e' {
			return i + 3
		}
	case 'l':
		if i+2 < len(s) && lower(s[i+2]) == 'l' {
			return i + 3
		}
	}
	return i
}

// scanSpaces resolves the three whitespace alternatives \s*[\r\n]+ | \s+(?!\S) | \s+
// at s[i], a whitespace rune (withNL false leaves out the first).
func scanSpaces(s string, i int, withNL bool) int {
	j, lastNL, lastStart, count := i, -1, i, 0
	for {
		r, n := peek(s, j)
		if !isS(r) {
			break
		}
		if isNL(r) {
			lastNL = j
		}
		lastStart = j
		j += n
		count++
	}
	switch {
	case withNL && lastNL >= 0:
		return lastNL + 1 // \s* backs off to the last newline, [\r\n]+ takes it
	case j == len(s) || count == 1:
		return j // \s+(?!\S) at the end of the text, or \s+ for a single space
	}
	return lastStart // \s+(?!\S): leave the last space to the next word
}

// scanGPT4 is patternQwen (digits 1) and patternLlama3 (digits 3).
func scanGPT4(s string, i, digits int, fold bool) int {
	r0, n0 := decodeAt(s, i)
	if r0 == '\'' {
		if e := scanContraction(s, i, fold); e > i {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isL(r0) {
		return scanRun(s, i+n0, 0, isL)
	}
	if !isNL(r0) && !isN(r0) {
		if r1, n1 := peek(s, i+n0); isL(r1) {
			return scanRun(s, i+n0+n1, 0, isL)
		}
	}
	// \p{N}{1,digits}
	if isN(r0) {
		return scanRun(s, i, digits, isN)
	}
	// ␠?[^\s\p{L}\p{N}]+[\r\n]*, then the whitespace alternatives
	return scanPunctOrSpaces(s, i, r0, isOther, isNL)
}

// scanPunctOrSpaces resolves the alternatives that end the GPT-4-style patterns at
// s[i] (rune r0): ␠?[in]+[tail]*, then \s*[\r\n]+ | \s+(?!\S) | \s+.
func scanPunctOrSpaces(s string, i int, r0 rune, in, tail func(rune) bool) int {
	j := i
	if r0 == ' ' {
		j++
	}
	if r, _ := peek(s, j); in(r) {
		return scanRun(s, scanRun(s, j, 0, in), 0, tail)
	}
	if isS(r0) {
		return scanSpaces(s, i, true)
	}
	return i
}

// scanGPT2 is gpt2Pattern.
func scanGPT2(s string, i int) int {
	r0, n0 := decodeAt(s, i)
	if r0 == '\'' {
		if e := scanContraction(s, i, false); e > i {
			return e
		}
	}
	j := i
	if r0 == ' ' {
		j += n0
	}
	r1, _ := peek(s, j)
	switch {
	case isL(r1):
		return scanRun(s, j, 0, isL)
	case isN(r1):
		return scanRun(s, j, 0, isN)
	case isOther(r1):
		return scanRun(s, j, 0, isOther)
	case isS(r0):
		return scanSpaces(s, i, false)
	}
	return i
}

func isASCIIPunct(r rune) bool {
	return '!' <= r && r <= '/' || ':' <= r && r <= '@' || '[' <= r && r <= '`' || '{' <= r && r <= '~'
}

func isASCIILetter(r rune) bool { return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' }

func isLM(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z'
	}
	return unicode.IsLetter(r) || unicode.IsMark(r)
}

// scanDeepSeek is patternDeepSeek.
func scanDeepSeek(s string, i int) int {
	r0, n0 := decodeAt(s, i)
	r1, n1 := peek(s, i+n0)
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if isASCIIPunct(r0) && isASCIILetter(r1) {
		return scanRun(s, i+n0+n1, 0, isASCIILetter)
	}
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if !isNL(r0) && !isL(r0) && !isPS(r0) && isLM(r1) {
		return scanRun(s, i+n0+n1, 0, isLM)
	}
	if isLM(r0) {
		return scanRun(s, i+n0, 0, isLM)
	}
	// ␠?[\p{P}\p{S}]+[\r\n]*, then the whitespace alternatives
	return scanPunctOrSpaces(s, i, r0, isPS, isNL)
}

// isUpperish is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and isLowerish [\p{Ll}\p{Lm}\p{Lo}\p{M}]:
// the two overlap in Lm, Lo and M.
func isUpperish(r rune) bool {
	if r < utf8.RuneSelf {
		return 'A' <= r && r <= 'Z'
	}
	return unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
}

func isLowerish(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z'
	}
	return unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
}

// scanTekken is patternTekken. Its first two alternatives are
//
//	P?[U]*[W]+ | P?[U]+[W]*    (P = [^\r\n\p{L}\p{N}], U upper-ish, W lower-ish)
//
// tried in that order, each first with P and then without (a mark is both a P and a
// U/W), and U* giving back runes from its longest run until W+ matches, as a
// backtracking engine does.
func scanTekken(s string, i int) int {
	r0, n0 := decodeAt(s, i)
	starts := []int{i}
	if !isNL(r0) && !isL(r0) && !isN(r0) {
		starts = []int{i + n0, i}
	}
	// P?[U]*[W]+
	for _, j := range starts {
		ends := []int{j} // rune boundaries of the longest U run from j
		for k := j; ; {
			r, n := peek(s, k)
			if !isUpperish(r) {
				break
			}
			k += n
			ends = append(ends, k)
		}
		for u := len(ends) - 1; u >= 0; u-- {
			if e := scanRun(s, ends[u], 0, isLowerish); e > ends[u] {
				return e
			}
		}
	}
	// P?[U]+[W]*
	for _, j := range starts {
		if e := scanRun(s, j, 0, isUpperish); e > j {
			return scanRun(s, e, 0, isLowerish)
		}
	}
	// \p{N}
	if isN(r0) {
		return i + n0
	}
	// ␠?[^\s\p{L}\p{N}]+[\r\n/]*, then the whitespace alternatives
	return scanPunctOrSpaces(s, i, r0, isOther, isNLOrSlash)
}

func isNLOrSlash(r rune) bool { return isNL(r) || r == '/' }
