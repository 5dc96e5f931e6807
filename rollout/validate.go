package rollout

import (
	"fmt"
	"math"
	"unsafe"
)

// Validate checks one rollout against the rules of docs/design.md and returns its
// row-level problems (Code, Column, Reason and RolloutID set; File and Row are the
// reader's to fill), or nil when it is valid. A rule broken many times in one rollout
// (say, 500 out-of-range tokens) gives one problem naming the first position and the
// count.
//
// It makes one pass over Tokens and one over LogProbs, without allocating unless it
// finds a problem: it runs on every row of every file, and rows are 100k+ tokens.
func Validate(r *Rollout, opts ReadOptions) []*Problem {
	var v validation
	if r.ID == "" {
		v.add(EEmptyID, ColRolloutID, "rollout_id is null or empty")
	}
	if r.Tokenizer != "" && opts.Tokenizer != "" && r.Tokenizer != opts.Tokenizer {
		v.add(ETokenizer, ColTokenizer, fmt.Sprintf("tokenizer is %q, the model's is %q: its token ids would mean other text to this model", r.Tokenizer, opts.Tokenizer))
	}
	if r.Tokens == nil {
		v.add(ENullTokens, ColTokens, "tokens is null")
	}
	if r.Tokens != nil && r.LogProbs != nil && len(r.LogProbs) != len(r.Tokens) {
		v.add(ELenMismatch, ColLogProbs, fmt.Sprintf("tokens has %d elements, logprobs has %d", len(r.Tokens), len(r.LogProbs)))
	}
	v.tokens(r.Tokens, opts.VocabSize)
	v.logProbs(r)
	v.segments(r)
	if r.HasFeedback && (r.Feedback < -1 || r.Feedback > 1) {
		v.add(EFeedbackRange, ColFeedback, fmt.Sprintf("feedback is %d; want -1, 0 or +1", r.Feedback))
	}
	if r.HasReward && (math.IsNaN(float64(r.Reward)) || math.IsInf(float64(r.Reward), 0)) {
		v.add(ERewardNaN, ColReward, fmt.Sprintf("reward is %v", r.Reward))
	}
	if x := float64(r.Temperature); r.HasTemperature && (math.IsNaN(x) || math.IsInf(x, 0) || x < 0) {
		v.add(ETemperature, ColTemperature, fmt.Sprintf("temperature is %v; want a finite value ≥ 0 (0: greedy)", r.Temperature))
	}
	for _, p := range v.problems {
		p.RolloutID = r.ID
	}
	return v.problems
}

// validation collects problems, one per code: later hits of a code only count.
type validation struct {
	problems []*Problem
	more     map[Code]int // hits after the first, for codes reported through hit
}

func (v *validation) add(code Code, col, reason string) {
	v.problems = append(v.problems, &Problem{Code: code, Column: col, Reason: reason})
}

// hit records one occurrence of code; the reason is only built for the first.
func (v *validation) hit(code Code, col string, reason func() string) {
	for _, p := range v.problems {
		if p.Code == code {
			if v.more == nil {
				v.more = make(map[Code]int)
			}
			v.more[code]++
			return
		}
	}
	v.add(code, col, reason())
}

// finish appends "(and N more)" to the problems that were hit more than once.
func (v *validation) finish() {
	for _, p := range v.problems {
		if n := v.more[p.Code]; n > 0 {
			p.Reason += fmt.Sprintf(" (and %d more)", n)
			delete(v.more, p.Code)
		}
	}
}

// tokens checks 0 ≤ id < vocab (or < 2^31 when vocab ≤ 0).
func (v *validation) tokens(toks []int32, vocab int) {
	limit := uint32(math.MaxInt32) + 1 // a negative id is ≥ 2^31 as uint32
	if vocab > 0 && vocab < math.MaxInt32 {
		limit = uint32(vocab)
	}
	first := nextBadToken(toks, 0, limit)
	if first < 0 {
		return
	}
	count := 0
	for i := first; i >= 0; i = nextBadToken(toks, i+1, limit) {
		count++
	}
	t := toks[first]
	var reason string
	if t < 0 {
		reason = fmt.Sprintf("tokens[%d] = %d is negative", first, t)
	} else {
		reason = fmt.Sprintf("tokens[%d] = %d is not below the vocabulary size %d", first, t, vocab)
	}
	if count > 1 {
		reason += fmt.Sprintf(" (%d token ids out of range)", count)
	}
	v.add(ETokenRange, ColTokens, reason)
}

// nextBadToken returns the first i ≥ from with uint32(toks[i]) ≥ limit, or −1.
//
// It tests 8 ids per branch: limit−1 − id, computed in 64 bits, has its top bit set
// exactly when id > limit−1, and the 8 differences are ORed together.
func nextBadToken(toks []int32, from int, limit uint32) int {
	l := uint64(limit - 1)
	i := from
	for ; i+8 <= len(toks); i += 8 {
		t := toks[i : i+8 : i+8]
		m := (l - uint64(uint32(t[0]))) | (l - uint64(uint32(t[1]))) |
			(l - uint64(uint32(t[2]))) | (l - uint64(uint32(t[3]))) |
			(l - uint64(uint32(t[4]))) | (l - uint64(uint32(t[5]))) |
			(l - uint64(uint32(t[6]))) | (l - uint64(uint32(t[7])))
		if m>>63 != 0 {
			break
		}
	}
	for ; i < len(toks); i++ {
		if uint32(toks[i]) >= limit {
			return i
		}
	}
	return -1
}

// logProbs checks that every non-null log-prob is finite and ≤ 0.
func (v *validation) logProbs(r *Rollout) {
	lp := r.LogProbs
	for i := nextBadLogProb(lp, 0); i >= 0; i = nextBadLogProb(lp, i+1) {
		if !r.LogProbValid(i) {
			continue // the value under a null is meaningless
		}
		switch x := lp[i]; {
		case x != x:
			v.hit(ELogprobNaN, ColLogProbs, func() string { return fmt.Sprintf("logprobs[%d] = NaN", i) })
		case x > math.MaxFloat32 || x < -math.MaxFloat32:
			v.hit(ELogprobInf, ColLogProbs, func() string { return fmt.Sprintf("logprobs[%d] = %v", i, x) })
		default:
			v.hit(ELogprobPositive, ColLogProbs, func() string { return fmt.Sprintf("logprobs[%d] = %v is positive", i, x) })
		}
	}
	v.finish()
}

// nextBadLogProb returns the first i ≥ from where lp[i] is NaN, ±Inf or > 0, or −1.
//
// It works on the IEEE bits u, 8 values per branch. The good values are +0 (u = 0)
// and the negative finite ones (0x80000000 ≤ u < 0xff800000); so a value is bad
// exactly when u−1 < 0x7fffffff (positive, +Inf or +NaN) or u > 0xff7fffff (−Inf or
// −NaN). Each test is a 64-bit subtraction whose top bit is set when it holds; they
// are ORed together.
func nextBadLogProb(lp []float32, from int) int {
	us := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(lp))), len(lp))
	bad := func(u uint32) uint64 {
		return (uint64(u-1) - 0x7fffffff) | (0xff7fffff - uint64(u))
	}
	i := from
	for ; i+8 <= len(us); i += 8 {
		x := us[i : i+8 : i+8]
		m := bad(x[0]) | bad(x[1]) | bad(x[2]) | bad(x[3]) |
			bad(x[4]) | bad(x[5]) | bad(x[6]) | bad(x[7])
		if m>>63 != 0 {
			break
		}
	}
	for ; i < len(us); i++ {
		if bad(us[i])>>63 != 0 {
			return i
		}
	}
	return -1
}

// segments checks each segment's range, kind and status, and that they are sorted by
// start and do not overlap.
func (v *validation) segments(r *Rollout) {
	n := len(r.Tokens)
	maxEnd, maxEndSeg := int32(math.MinInt32), -1
	for k, s := range r.Segments {
		switch {
		case s.Start < 0:
			v.hit(ESegRange, ColSegments, func() string { return fmt.Sprintf("segment %d [%d, %d): start < 0 (or null)", k, s.Start, s.End) })
		case r.Tokens != nil && int(s.End) > n:
			v.hit(ESegRange, ColSegments, func() string {
				return fmt.Sprintf("segment %d [%d, %d): end > %d tokens", k, s.Start, s.End, n)
			})
		case s.Start >= s.End:
			v.hit(ESegRange, ColSegments, func() string { return fmt.Sprintf("segment %d [%d, %d): start >= end", k, s.Start, s.End) })
		}
		if k > 0 {
			prev := r.Segments[k-1]
			switch {
			case s.Start < prev.Start:
				v.hit(ESegOrder, ColSegments, func() string {
					return fmt.Sprintf("segment %d [%d, %d) starts before segment %d [%d, %d)", k, s.Start, s.End, k-1, prev.Start, prev.End)
				})
			case s.Start < maxEnd:
				o := r.Segments[maxEndSeg]
				v.hit(ESegOverlap, ColSegments, func() string {
					return fmt.Sprintf("segment %d [%d, %d) overlaps segment %d [%d, %d)", k, s.Start, s.End, maxEndSeg, o.Start, o.End)
				})
			}
		}
		if s.End > maxEnd {
			maxEnd, maxEndSeg = s.End, k
		}
		switch {
		case s.KindName != "":
			if _, ok := ParseSegmentKind(s.KindName); !ok {
				v.hit(ESegKind, ColSegments, func() string {
					return fmt.Sprintf("segment %d [%d, %d): unknown kind %q", k, s.Start, s.End, s.KindName)
				})
			}
		case s.Kind == KindUnknown:
			v.hit(ESegKind, ColSegments, func() string { return fmt.Sprintf("segment %d [%d, %d): kind is null", k, s.Start, s.End) })
		case int(s.Kind) >= len(kindNames):
			v.hit(ESegKind, ColSegments, func() string { return fmt.Sprintf("segment %d [%d, %d): unknown kind %v", k, s.Start, s.End, s.Kind) })
		}
		if s.Status != StatusNone && s.Status != StatusOK && s.Status != StatusError {
			v.hit(ESegStatus, ColSegments, func() string {
				return fmt.Sprintf("segment %d [%d, %d): status %d; want null, 0 (ok) or 1 (error)", k, s.Start, s.End, s.Status)
			})
		}
	}
	v.finish()
}
