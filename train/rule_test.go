package train

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/hindsight-ai/hindsight/rollout"
)

// turn is one segment of chatRollout: its kind and text, the first header tokens of
// it being the harness's role header.
type turn struct {
	kind   rollout.SegmentKind
	text   string
	header int
}

// chatTurns are a conversation in the byte tokenizer's chat format: a user turn, a
// policy turn of an assistant segment and a tool call that continues it (no header
// of its own), the tool's result and a last assistant turn.
var chatTurns = []turn{
	{rollout.KindUser, "<|user|>What is 2+2?<|end|>", 1},
	{rollout.KindAssistant, "<|assistant|>Let me check.", 1},
	{rollout.KindToolCall, "<tool_call>calc 2+2</tool_call><|end|>", 0},
	{rollout.KindToolResult, "<|tool|>4<|end|>", 1},
	{rollout.KindAssistant, "<|assistant|>It is 4.<|end|>", 1},
}

// logProbs says what chatRollout gives the logprobs column.
type logProbs int

const (
	nullList   logProbs = iota // the whole list null, as a recorder without log-probs writes it
	allNull                    // a list of nulls
	sampled                    // policy tokens past the header sampled, the rest null
	notOnTurns                 // a log-prob on the user turn only: none on a policy token
)

// chatRollout returns turns as a rollout of the byte tokenizer with the log-probs lp
// and the tokens that a sampled rollout trains (policy tokens past the header).
func chatRollout(t *testing.T, turns []turn, lp logProbs) (*rollout.Rollout, []bool) {
	t.Helper()
	tok := tokenizer.NewBytes()
	r := &rollout.Rollout{ID: "chat", TaskID: "sum", Tokenizer: tok.Fingerprint(), Reward: 1, HasReward: true}
	var want []bool
	var valid []byte
	for _, tu := range turns {
		ids := tok.Encode(tu.text)
		start := len(r.Tokens)
		for k := range ids {
			n := len(r.Tokens)
			if n%8 == 0 {
				valid = append(valid, 0)
			}
			policy := tu.kind.IsPolicy() && k >= tu.header
			want = append(want, policy)
			if (lp == sampled && policy) || (lp == notOnTurns && !tu.kind.IsPolicy()) {
				valid[n>>3] |= 1 << (uint(n) & 7)
			}
			r.Tokens = append(r.Tokens, ids[k])
			r.LogProbs = append(r.LogProbs, -0.5)
		}
		r.Segments = append(r.Segments, rollout.Segment{Start: int32(start), End: int32(len(r.Tokens)), Kind: tu.kind,
			KindName: tu.kind.String(), Status: rollout.StatusNone})
	}
	if lp == nullList {
		r.LogProbs = nil
	} else {
		r.SetLogProbValidity(valid, 0)
	}
	return r, want
}

// TestRuleTrainsRolloutsWithoutLogProbsWhenAllowed: a rollout without any sampler
// log-prob (a null list or a list of nulls) trains nothing by default, and with
// allow_no_sampler its policy segments past the role header, exactly the tokens the
// same rollout trains when sampled; a sampled rollout trains the same either way.
func TestRuleTrainsRolloutsWithoutLogProbsWhenAllowed(t *testing.T) {
	header := HeaderFor(tokenizer.NewBytes())
	require.Equal(t, tokenizer.NewBytes().Encode("<|assistant|>"), header)
	for _, tc := range []struct {
		name  string
		lp    logProbs
		allow bool
		train bool   // whether it trains the policy tokens past the header
		why   string // Rule.Why when it trains nothing
	}{
		{"null list", nullList, false, false, "no sampler log-probs, and credit.allow_no_sampler is false"},
		{"null list allowed", nullList, true, true, ""},
		{"all null", allNull, false, false, "no sampler log-probs, and credit.allow_no_sampler is false"},
		{"all null allowed", allNull, true, true, ""},
		{"sampled", sampled, false, true, ""},
		{"sampled allowed", sampled, true, true, ""},
		{"no log-prob on a policy token", notOnTurns, true, false, "no policy token after position 0 has a sampler log-prob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, want := chatRollout(t, chatTurns, tc.lp)
			rule := Rule{AllowNoSampler: tc.allow, Header: header}
			xr := ToTrainer(r, nil, rule)
			if !tc.train {
				want = make([]bool, len(want))
			}
			require.Equal(t, want, xr.Trainable)
			require.Equal(t, tc.why, rule.Why(r))
			for i, lp := range xr.Sampler {
				_, ok := r.LogProb(i)
				require.Equal(t, !ok, math.IsNaN(float64(lp)), "token %d: the sampler log-prob is NaN exactly where null", i)
			}
		})
	}
}

// TestRuleHeaderAndReasons: without a header every policy token trains (but never
// position 0); a rollout whose policy segments hold only the header, or that has no
// policy segment, trains nothing and says why.
func TestRuleHeaderAndReasons(t *testing.T) {
	allow := Rule{AllowNoSampler: true, Header: HeaderFor(tokenizer.NewBytes())}

	r, _ := chatRollout(t, chatTurns, nullList)
	m := Rule{AllowNoSampler: true}.Mask(r)
	for k, s := range r.Segments {
		for i := s.Start; i < s.End; i++ {
			require.Equal(t, s.Kind.IsPolicy(), m[i], "segment %d token %d", k, i)
		}
	}

	first := []turn{{rollout.KindAssistant, "<|assistant|>Hi.<|end|>", 1}}
	r, want := chatRollout(t, first, allNull)
	require.False(t, want[0])
	require.Equal(t, want, allow.Mask(r), "past the header")
	require.False(t, Rule{AllowNoSampler: true}.Mask(r)[0], "position 0 has no context")

	r, _ = chatRollout(t, []turn{chatTurns[0], {rollout.KindAssistant, "<|assistant|>", 1}}, nullList)
	require.Equal(t, "its policy segments hold only the role header", allow.Why(r))

	r, _ = chatRollout(t, chatTurns[:1], nullList)
	require.Equal(t, "no assistant, reasoning or tool_call segment", allow.Why(r))
}

// TestHeaderFor: the assistant header of each chat format hindsight knows, found from
// the tokenizer's special tokens; none for Mistral, whose assistant turn has none.
func TestHeaderFor(t *testing.T) {
	for _, tc := range []struct{ name, header string }{
		{"qwen3", "<|im_start|>assistant\n"},
		{"llama3", "<|start_header_id|>assistant<|end_header_id|>\n\n"},
		{"deepseek_v3", "<｜Assistant｜>"},
		{"mistral_nemo", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok := tokenizertest.Load(t, tc.name)
			h := HeaderFor(tok)
			if tc.header == "" {
				require.Empty(t, h)
				return
			}
			require.Equal(t, tok.Encode(tc.header), h)
			text, err := tok.Decode(h)
			require.NoError(t, err)
			require.Equal(t, tc.header, text)
		})
	}
}
