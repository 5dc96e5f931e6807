package rollout

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateValid(t *testing.T) {
	require.Nil(t, Validate(fxRollout("a", 16), ReadOptions{VocabSize: 1000, Tokenizer: "bytes-v1"}))

	// Kind without KindName (built in code), null tokenizer, edge values.
	r := &Rollout{ID: "b", Tokens: []int32{0, 999}, LogProbs: []float32{0, -math.MaxFloat32},
		Segments:  []Segment{{Start: 0, End: 1, Kind: KindUser, Status: StatusOK}, {Start: 1, End: 2, Kind: KindAssistant, Status: StatusError}},
		HasReward: true, Reward: -3, HasFeedback: true, Feedback: 1}
	require.Nil(t, Validate(r, ReadOptions{VocabSize: 1000, Tokenizer: "bytes-v1"}))

	// NaN, +Inf and positive values at null positions are not looked at.
	r.LogProbs = []float32{float32(math.NaN()), float32(math.Inf(1))}
	r.SetLogProbValidity([]byte{0}, 0)
	require.Nil(t, Validate(r, ReadOptions{}))
	r.SetLogProbValidity([]byte{0b1000}, 2) // bit 3: token 1 valid
	ps := Validate(r, ReadOptions{})
	require.Len(t, ps, 1)
	require.Equal(t, ELogprobInf, ps[0].Code)
	require.Equal(t, "logprobs[1] = +Inf", ps[0].Reason)
}

func TestValidateProblems(t *testing.T) {
	seg := func(start, end int32, kind SegmentKind) Segment {
		return Segment{Start: start, End: end, Kind: kind, Status: StatusNone}
	}
	tests := []struct {
		name   string
		r      *Rollout
		opts   ReadOptions
		codes  []Code
		reason string // of the first problem
	}{
		{"empty", &Rollout{}, ReadOptions{}, []Code{EEmptyID, ENullTokens}, "rollout_id is null or empty"},
		{"null tokens with segments", &Rollout{ID: "x", Segments: []Segment{seg(0, 5, KindUser)}}, ReadOptions{}, []Code{ENullTokens}, "tokens is null"},
		{"vocab boundary", &Rollout{ID: "x", Tokens: []int32{9, 10, 11, -1}}, ReadOptions{VocabSize: 10}, []Code{ETokenRange},
			"tokens[1] = 10 is not below the vocabulary size 10 (3 token ids out of range)"},
		{"many nans", &Rollout{ID: "x", Tokens: make([]int32, 4), LogProbs: []float32{-1, float32(math.NaN()), float32(math.NaN()), 2}}, ReadOptions{}, []Code{ELogprobNaN, ELogprobPositive},
			"logprobs[1] = NaN (and 1 more)"},
		{"segment kinds", &Rollout{ID: "x", Tokens: make([]int32, 4), Segments: []Segment{seg(0, 1, KindUnknown), seg(1, 2, SegmentKind(99)), {Start: 2, End: 3, KindName: "bot"}}}, ReadOptions{}, []Code{ESegKind},
			"segment 0 [0, 1): kind is null (and 2 more)"},
		{"overlap with an earlier segment", &Rollout{ID: "x", Tokens: make([]int32, 10), Segments: []Segment{seg(0, 8, KindUser), seg(2, 3, KindUser)}}, ReadOptions{}, []Code{ESegOverlap},
			"segment 1 [2, 3) overlaps segment 0 [0, 8)"},
		{"overlap with a long segment", &Rollout{ID: "x", Tokens: make([]int32, 10), Segments: []Segment{seg(0, 8, KindUser), seg(8, 9, KindUser), seg(8, 10, KindUser)}}, ReadOptions{}, []Code{ESegOverlap},
			"segment 2 [8, 10) overlaps segment 1 [8, 9)"},
		{"reward -inf", &Rollout{ID: "x", Tokens: []int32{}, HasReward: true, Reward: float32(math.Inf(-1))}, ReadOptions{}, []Code{ERewardNaN}, "reward is -Inf"},
		{"feedback -2", &Rollout{ID: "x", Tokens: []int32{}, HasFeedback: true, Feedback: -2}, ReadOptions{}, []Code{EFeedbackRange}, "feedback is -2; want -1, 0 or +1"},
		{"status", &Rollout{ID: "x", Tokens: make([]int32, 2), Segments: []Segment{{Start: 0, End: 2, Kind: KindToolResult, Status: 5}}}, ReadOptions{}, []Code{ESegStatus},
			"segment 0 [0, 2): status 5; want null, 0 (ok) or 1 (error)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := Validate(tt.r, tt.opts)
			var codes []Code
			for _, p := range ps {
				codes = append(codes, p.Code)
				require.Equal(t, tt.r.ID, p.RolloutID)
				require.NotEmpty(t, p.Column)
			}
			require.Equal(t, tt.codes, codes, "%v", ps)
			require.Equal(t, tt.reason, ps[0].Reason)
		})
	}
}

// TestNextBadLogProb checks the bit tricks against plain float comparisons at every
// position of a chunk and its tail.
func TestNextBadLogProb(t *testing.T) {
	vals := []float32{0, float32(math.Copysign(0, -1)), -1, -math.MaxFloat32, -1e-45, 1e-45, 3, math.MaxFloat32,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), -float32(math.NaN())}
	for _, v := range vals {
		wantBad := !(v <= 0 && v >= -math.MaxFloat32)
		for pos := 0; pos < 19; pos++ {
			lp := make([]float32, 19)
			lp[pos] = v
			want := -1
			if wantBad {
				want = pos
			}
			require.Equal(t, want, nextBadLogProb(lp, 0), "%v at %d", v, pos)
			toks := make([]int32, 19)
			toks[pos] = int32(math.Float32bits(v))
			wantTok := -1
			if toks[pos] < 0 || toks[pos] >= 1000 {
				wantTok = pos
			}
			require.Equal(t, wantTok, nextBadToken(toks, 0, 1000), "token %d at %d", toks[pos], pos)
		}
	}
}
