package rollout

import (
	"os"
	"path/filepath"
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
