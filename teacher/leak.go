package teacher

import (
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// LeakConfig configures the leakage guard: a hint must say what to do, not paste the
// answer. A hint that copies a run of at least MinRunTokens tokens, or MinRunChars
// characters (compared case-folded with white space collapsed), of the scored range
// itself or of any tool output after it is flagged.
type LeakConfig struct {
	MinRunTokens int `yaml:"min_run_tokens"`
	MinRunChars  int `yaml:"min_run_chars"`
	// Action is what happens to a flagged hint: "drop" (the selection gets no hint) or
	// "keep" (it is kept and only counted).
	Action string `yaml:"action"`
}

// DefaultLeakConfig returns 12 tokens, 40 characters, drop.
func DefaultLeakConfig() LeakConfig {
	return LeakConfig{MinRunTokens: 12, MinRunChars: 40, Action: "drop"}
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (c LeakConfig) Validate(prefix string) error {
	switch {
	case c.MinRunTokens < 1:
		return fmt.Errorf("%smin_run_tokens: must be ≥ 1, got %d", prefix, c.MinRunTokens)
	case c.MinRunChars < 1:
		return fmt.Errorf("%smin_run_chars: must be ≥ 1, got %d", prefix, c.MinRunChars)
	case c.Action != "drop" && c.Action != "keep":
		return fmt.Errorf("%saction: want drop or keep, got %q", prefix, c.Action)
	}
	return nil
}

// Leak describes a copied run the guard found.
type Leak struct {
	// From is "segment" (the scored range [InsertAt, End)) or "tool_output" (a tool
	// result after End).
	From string
	// Segment is the index of the segment copied from (the target for "segment").
	Segment int
	// Tokens and Chars are the length of the longest copied run found of each unit (0
	// when that unit stayed under its threshold).
	Tokens, Chars int
}

// String describes the copied run for logs.
func (l *Leak) String() string {
	return fmt.Sprintf("copies %d tokens / %d chars of %s (segment %d)", l.Tokens, l.Chars, l.From, l.Segment)
}

// LeakGuard checks hints against the rollout they are for.
type LeakGuard struct {
	cfg LeakConfig
	tok tokenizer.Tokenizer
}

// NewLeakGuard returns a guard that tokenizes and decodes with tok.
func NewLeakGuard(cfg LeakConfig, tok tokenizer.Tokenizer) *LeakGuard {
	return &LeakGuard{cfg: cfg, tok: tok}
}

// Check returns the first leak of hint text for sel in r, or nil. A run the teacher's
// context already shows is no leak: the guard is meant for written hints, and a hint
// may repeat what the visible prefix (every token before InsertAt: the task prompt,
// earlier turns and tool results) states, or what shown holds (a sibling's solution,
// the environment feedback placed in the context).
func (g *LeakGuard) Check(r *rollout.Rollout, sel Selection, text string, shown ...string) *Leak {
	hintIDs := g.tok.EncodeText(text)
	hintText := normalize(text)
	shownIDs := [][]int32{r.Tokens[:sel.InsertAt]}
	var shownText [][]byte
	if len(hintText) >= g.cfg.MinRunChars {
		if s, err := g.tok.Decode(r.Tokens[:sel.InsertAt]); err == nil {
			shownText = append(shownText, []byte(normalize(s)))
		}
	}
	for _, s := range shown {
		shownIDs = append(shownIDs, g.tok.EncodeText(s))
		shownText = append(shownText, []byte(normalize(s)))
	}
	refs := []struct {
		from       string
		seg        int
		start, end int32
	}{{"segment", sel.Segment, sel.InsertAt, sel.End}}
	for i, s := range r.Segments {
		if s.Kind == rollout.KindToolResult && s.Start >= sel.End {
			refs = append(refs, struct {
				from       string
				seg        int
				start, end int32
			}{"tool_output", i, s.Start, s.End})
		}
	}
	for _, ref := range refs {
		ids := r.Tokens[ref.start:ref.end]
		nt := longestRun(hintIDs, ids, g.cfg.MinRunTokens, shownIDs...)
		nc := 0
		if len(hintText) >= g.cfg.MinRunChars {
			if s, err := g.tok.Decode(ids); err == nil {
				nc = longestRun([]byte(hintText), []byte(normalize(s)), g.cfg.MinRunChars, shownText...)
			}
		}
		if nt > 0 || nc > 0 {
			return &Leak{From: ref.from, Segment: ref.seg, Tokens: nt, Chars: nc}
		}
	}
	return nil
}

// normalize folds case and collapses each run of white space to one space.
func normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	space := false
	for _, r := range strings.ToLower(s) {
		if unicode.IsSpace(r) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// longestRun returns the length of the longest run that hint and ref share, if it is
// at least k long, else 0. A run counts only from a k-window of hint that no slice of
// shown holds: copying what the context already shows is no leak. It hashes every
// k-window of hint once and rolls a window over ref (and over each shown slice), so it
// is linear in len(ref) and len(shown) however long they are.
func longestRun[T int32 | byte](hint, ref []T, k int, shown ...[]T) int {
	if k <= 0 || len(hint) < k || len(ref) < k {
		return 0
	}
	starts := map[uint64][]int{}
	for i := 0; i+k <= len(hint); i++ {
		h := windowHash(hint[i : i+k])
		starts[h] = append(starts[h], i)
	}
	seen := make([]bool, len(hint)) // hint windows (by start) that shown holds
	for _, sh := range shown {
		rollWindows(sh, k, func(j int, h uint64) {
			for _, i := range starts[h] {
				if !seen[i] && slices.Equal(hint[i:i+k], sh[j:j+k]) {
					seen[i] = true
				}
			}
		})
	}
	best := 0
	rollWindows(ref, k, func(j int, h uint64) {
		for _, i := range starts[h] {
			if seen[i] {
				continue
			}
			n := 0
			for i+n < len(hint) && j+n < len(ref) && hint[i+n] == ref[j+n] {
				n++
			}
			if n >= k && n > best {
				best = n
			}
		}
	})
	return best
}

const runHashBase = 1_000_003

// windowHash is the polynomial hash of w that rollWindows rolls.
func windowHash[T int32 | byte](w []T) uint64 {
	var h uint64
	for _, v := range w {
		h = h*runHashBase + uint64(v) + 1
	}
	return h
}

// rollWindows calls f with the start and hash of every k-window of xs, in order.
func rollWindows[T int32 | byte](xs []T, k int, f func(j int, h uint64)) {
	if len(xs) < k {
		return
	}
	var pow uint64 = 1 // base^(k-1)
	for range k - 1 {
		pow *= runHashBase
	}
	h := windowHash(xs[:k])
	for j := 0; ; j++ {
		f(j, h)
		if j+k >= len(xs) {
			return
		}
		h = (h-(uint64(xs[j])+1)*pow)*runHashBase + uint64(xs[j+k]) + 1
	}
}
