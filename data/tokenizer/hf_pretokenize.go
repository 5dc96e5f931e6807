package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// preTokenizer is a tokenizer.json "pre_tokenizer": a sequence of splitting steps
// that ends in ByteLevel. The ByteLevel byte-to-symbol mapping itself is done by
// the BPE model on the raw bytes of each pre-token.
type preTokenizer struct {
	steps     []splitStep
	byteLevel bool // a ByteLevel step is present (required for now)
	regexp2   bool // run every regex with regexp2, not the hand-written scanners (tests)
}

// splitStep cuts s into pieces, calling emit for each non-empty piece in order.
type splitStep interface {
	split(s string, emit func(string))
}

// preScratch holds the buffers that one encode call reuses between pre-tokens.
type preScratch struct {
	a, b []string
}

// split cuts text into pre-tokens and calls emit for each, in order.
func (p *preTokenizer) split(text string, sc *preScratch, emit func(string)) {
	if text == "" {
		return
	}
	switch len(p.steps) {
	case 0:
		emit(text)
		return
	case 1:
		p.steps[0].split(text, emit)
		return
	}
	cur := append(sc.a[:0], text)
	next := sc.b[:0]
	collect := func(piece string) { next = append(next, piece) }
	for _, st := range p.steps[:len(p.steps)-1] {
		next = next[:0]
		for _, s := range cur {
			st.split(s, collect)
		}
		cur, next = next, cur
	}
	last := p.steps[len(p.steps)-1]
	for _, s := range cur {
		last.split(s, emit)
	}
	sc.a, sc.b = cur, next
}

// parsePreTokenizer reads tokenizer.json's "pre_tokenizer".
func parsePreTokenizer(raw json.RawMessage, onlyRegexp2 bool) (*preTokenizer, error) {
	p := &preTokenizer{regexp2: onlyRegexp2}
	if err := p.add(raw, "pre_tokenizer"); err != nil {
		return nil, err
	}
	if !p.byteLevel {
		return nil, unsupported("pre_tokenizer", "tokenizer: only byte-level BPE is supported and the pre-tokenizer has no ByteLevel step")
	}
	return p, nil
}

func (p *preTokenizer) add(raw json.RawMessage, path string) error {
	typ, err := jsonType(raw, path)
	if err != nil {
		return err
	}
	if p.byteLevel && typ != "" {
		return unsupported(path, fmt.Sprintf("pre-tokenizer %q after ByteLevel", typ))
	}
	switch typ {
	case "":
		return nil
	case "Sequence":
		var v struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		for i, r := range v.PreTokenizers {
			if err := p.add(r, fmt.Sprintf("%s.pretokenizers[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case "ByteLevel":
		var v struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"` // default true
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		p.byteLevel = true
		if v.AddPrefixSpace {
			p.steps = append(p.steps, prefixSpaceStep{})
		}
		if v.UseRegex == nil || *v.UseRegex {
			m, err := newRegexMatcher(gpt2Pattern, p.regexp2)
			if err != nil {
				return fmt.Errorf("load %s: %w", path, err)
			}
			p.steps = append(p.steps, &patternSplit{m: m, behavior: isolated})
		}
		return nil
	case "Split":
		st, err := parseSplit(raw, path, p.regexp2)
		if err != nil {
			return err
		}
		p.steps = append(p.steps, st)
		return nil
	case "Digits":
		var v struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("parse %s: %w", path, err)
		}
		b := contiguous
		if v.IndividualDigits {
			b = isolated
		}
		p.steps = append(p.steps, &patternSplit{m: runeMatcher(unicode.IsNumber), behavior: b})
		return nil
	}
	return unsupported(path, fmt.Sprintf("pre-tokenizer type %q (supported: Sequence, Split, ByteLevel, Digits)", typ))
}

// gpt2Pattern is the ByteLevel pre-tokenizer's regex when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// prefixSpaceStep is ByteLevel's add_prefix_space: a space in front of each piece
// that does not start with one.
type prefixSpaceStep struct{}

func (prefixSpaceStep) split(s string, emit func(string)) {
	if !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	emit(s)
}

// splitBehavior is a Split pre-tokenizer's "behavior".
type splitBehavior int

const (
	removed splitBehavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed": removed, "Isolated": isolated, "MergedWithPrevious": mergedWithPrevious,
	"MergedWithNext": mergedWithNext, "Contiguous": contiguous,
}

// matcher finds the non-overlapping matches of a pattern in s, in order, as byte
// offsets [start, end).
type matcher interface {
	matches(s string, fn func(start, end int))
}

// patternSplit is the Split pre-tokenizer (and Digits): it cuts s at a pattern's
// matches, keeping or merging the matches as the behavior says.
type patternSplit struct {
	m        matcher
	behavior splitBehavior
	invert   bool
}

func parseSplit(raw json.RawMessage, path string, onlyRegexp2 bool) (*patternSplit, error) {
	var v struct {
		Pattern struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	b, ok := splitBehaviors[v.Behavior]
	if !ok {
		return nil, unsupported(path+".behavior", fmt.Sprintf("split behavior %q", v.Behavior))
	}
	st := &patternSplit{behavior: b, invert: v.Invert}
	switch {
	case v.Pattern.Regex != nil:
		m, err := newRegexMatcher(*v.Pattern.Regex, onlyRegexp2)
		if err != nil {
			return nil, fmt.Errorf("load %s.pattern.Regex: %w", path, err)
		}
		st.m = m
	case v.Pattern.String != nil && *v.Pattern.String != "":
		st.m = literalMatcher(*v.Pattern.String)
	default:
		return nil, unsupported(path+".pattern", "split pattern: neither a Regex nor a non-empty String")
	}
	return st, nil
}

func (p *patternSplit) split(s string, emit func(string)) {
	if p.behavior == isolated && !p.invert {
		// The hot path: every match and every gap is a piece.
		prev := 0
		p.m.matches(s, func(start, end int) {
			if start > prev {
				emit(s[prev:start])
			}
			if end > start {
				emit(s[start:end])
			}
			prev = end
		})
		if prev < len(s) {
			emit(s[prev:])
		}
		return
	}
	// General path, as in the Rust NormalizedString::split: list the matches and
	// the gaps, then merge by behavior.
	type span struct {
		start, end int
		match      bool
	}
	var spans []span
	prev := 0
	p.m.matches(s, func(start, end int) {
		if start > prev {
			spans = append(spans, span{prev, start, p.invert})
		}
		spans = append(spans, span{start, end, !p.invert})
		prev = end
	})
	if prev < len(s) {
		spans = append(spans, span{prev, len(s), p.invert})
	}
	var out []span
	switch p.behavior {
	case removed:
		for _, sp := range spans {
			if !sp.match {
				out = append(out, sp)
			}
		}
	case isolated:
		out = spans
	case mergedWithPrevious:
		prevMatch := false
		for _, sp := range spans {
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	case mergedWithNext:
		prevMatch := false
		for i := len(spans) - 1; i >= 0; i-- {
			sp := spans[i]
			if sp.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sp.start
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		prevMatch := false
		for _, sp := range spans {
			if sp.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sp.end
			} else {
				out = append(out, sp)
			}
			prevMatch = sp.match
		}
	}
	for _, sp := range out {
		if sp.end > sp.start {
			emit(s[sp.start:sp.end])
		}
	}
}

// literalMatcher matches a fixed string.
type literalMatcher string

func (l literalMatcher) matches(s string, fn func(start, end int)) {
	for off := 0; ; {
		i := strings.Index(s[off:], string(l))
		if i < 0 {
			return
		}
		fn(off+i, off+i+len(l))
		off += i + len(l)
	}
}

// runeMatcher matches every rune for which it returns true, one rune a match.
type runeMatcher func(rune) bool

func (f runeMatcher) matches(s string, fn func(start, end int)) {
	for i, r := range s {
		if f(r) {
			fn(i, i+utf8.RuneLen(r))
		}
	}
}
