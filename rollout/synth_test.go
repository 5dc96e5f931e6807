package rollout

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSynthDeterministicAndValid(t *testing.T) {
	opts := SynthOptions{N: 10, Tokens: 3000, Seed: 42, PerFile: 4}
	a, b := t.TempDir(), t.TempDir()
	pa, err := WriteSynth(a, opts)
	require.NoError(t, err)
	require.Len(t, pa, 3, "10 rollouts at 4 per file")
	pb, err := WriteSynth(b, opts)
	require.NoError(t, err)
	for i := range pa {
		ba, _ := os.ReadFile(pa[i])
		bb, _ := os.ReadFile(pb[i])
		require.Equal(t, ba, bb, "same seed, same bytes: %s", filepath.Base(pa[i]))
		rows, problems, err := ValidateFile(pa[i], ReadOptions{VocabSize: 256, Tokenizer: BytesTokenizer})
		require.NoError(t, err)
		require.Empty(t, problems)
		require.Positive(t, rows)
	}
	other := Synthesize(SynthOptions{Tokens: 3000, Seed: 43}, 0)
	require.NotEqual(t, Synthesize(opts, 0).Tokens, other.Tokens, "another seed, another rollout")
}

func TestSynthShape(t *testing.T) {
	opts := SynthOptions{Tokens: 8000, Seed: 1, GroupSize: 4}
	kinds := map[SegmentKind]int{}
	var failed, withReward, withFeedbackText int
	tasks := map[string]int{}
	for i := 0; i < 16; i++ {
		r := Synthesize(opts, i)
		require.Empty(t, Validate(r, ReadOptions{VocabSize: 256}))
		require.InDelta(t, 8000, len(r.Tokens), 1600, "about -tokens tokens")
		require.Equal(t, KindSystem, r.Segments[0].Kind)
		require.Equal(t, KindUser, r.Segments[1].Kind)
		require.Equal(t, KindAssistant, r.Segments[len(r.Segments)-1].Kind, "ends with a final answer")
		for _, s := range r.Segments {
			kinds[s.Kind]++
			if s.Kind == KindToolResult && s.Status == StatusError {
				failed++
			}
			if s.Feedback != "" {
				withFeedbackText++
			}
			// The role header of every turn is context: null log-probs.
			if s.Kind != KindToolCall {
				require.False(t, r.LogProbValid(int(s.Start)), "header token of %s", s.Kind)
			}
		}
		if r.HasReward {
			withReward++
		}
		tasks[r.TaskID]++
		// Only policy segments carry sampler log-probs.
		for i := range r.Tokens {
			if r.LogProbValid(i) {
				require.True(t, r.Trainable(i))
			}
		}
	}
	for _, k := range []SegmentKind{KindReasoning, KindToolCall, KindToolResult} {
		require.Positive(t, kinds[k], k.String())
	}
	require.Positive(t, failed, "some tool calls fail")
	require.Positive(t, withFeedbackText, "some segments carry a person's comment")
	require.Positive(t, withReward)
	require.Len(t, tasks, 4, "16 rollouts in task groups of 4")
}

// wordTokenizer is a stand-in tokenizer for TestSynthTokenizer: every run of
// letters one id (1000 + a hash), every other byte its own id, and the role
// markers one id each, as a chat model's added tokens are.
type wordTokenizer struct{}

func (wordTokenizer) Encode(text string) []int32 {
	var ids []int32
	for i := 0; i < len(text); {
		switch {
		case strings.HasPrefix(text[i:], "<|im_start|>"):
			ids, i = append(ids, 900), i+len("<|im_start|>")
		case strings.HasPrefix(text[i:], "<|im_end|>"):
			ids, i = append(ids, 901), i+len("<|im_end|>")
		case text[i] >= 'a' && text[i] <= 'z':
			j, h := i, int32(0)
			for j < len(text) && text[j] >= 'a' && text[j] <= 'z' {
				h = (h*31 + int32(text[j])) % 4000
				j++
			}
			ids, i = append(ids, 1000+h), j
		default:
			ids, i = append(ids, int32(text[i])), i+1
		}
	}
	return ids
}

func (wordTokenizer) Fingerprint() string { return "sha256:word" }

// TestSynthTokenizer: with a tokenizer the rollouts are its ids and carry its
// fingerprint, with a log-prob per id (valid where the policy wrote it) and the
// role markers as single ids; without one, byte ids exactly as before the option
// existed (length, a weighted token sum and the log-probs' sum recorded from the
// code before it, so the byte path's random stream is unchanged).
func TestSynthTokenizer(t *testing.T) {
	opts := SynthOptions{Tokens: 2000, Seed: 5}
	bytesR := Synthesize(opts, 3)
	var sum int64
	for i, id := range bytesR.Tokens {
		sum += int64(id) * int64(i%7+1)
	}
	var lps float64
	for _, x := range bytesR.LogProbs {
		lps += float64(x)
	}
	require.Equal(t, BytesTokenizer, bytesR.Tokenizer)
	require.Equal(t, []any{2150, int64(740372)}, []any{len(bytesR.Tokens), sum}, "the byte path's rollout changed")
	require.InDelta(t, -271.5982, lps, 1e-3)

	opts.Tokenizer = wordTokenizer{}
	r := Synthesize(opts, 3)
	require.Equal(t, "sha256:word", r.Tokenizer)
	require.Empty(t, Validate(r, ReadOptions{VocabSize: 5000, Tokenizer: "sha256:word"}))
	require.Len(t, r.LogProbs, len(r.Tokens))
	require.InDelta(t, 2000, len(r.Tokens), 600, "about opts.Tokens of the tokenizer's ids")
	require.Equal(t, int32(900), r.Tokens[0], "the system turn's <|im_start|> is one id")
	var words, policy int
	for i, id := range r.Tokens {
		if id >= 1000 {
			words++
		}
		if r.LogProbValid(i) {
			policy++
		}
	}
	require.Greater(t, words, len(r.Tokens)/5, "words are the tokenizer's ids, not bytes")
	require.Positive(t, policy)
	require.Less(t, policy, len(r.Tokens), "harness headers and tool results are not the policy's")
	for _, s := range r.Segments {
		require.Less(t, s.Start, s.End)
		if s.Kind != KindToolCall { // a call continues its reasoning turn
			require.Equal(t, int32(900), r.Tokens[s.Start], "segment %v starts at its role header", s.Kind)
		}
	}
}
