package toolworld

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// FuzzEpisode feeds arbitrary policy turns to an episode: Step never panics, the
// rollout stays valid and within MaxTokens (plus a separator), and the reward is 0 or 1.
func FuzzEpisode(f *testing.F) {
	for _, s := range []string{"ls tmp\ncat tmp/fox.txt\nanswer 10", "calc ((1+2)*3)/0\nget", "grep -ic x tmp\nset a b c\n<|end|>", "\x00\xff<|tool|>"} {
		f.Add(s, uint8(3))
	}
	tok := tokenizer.NewBytes()
	f.Fuzz(func(t *testing.T, script string, task uint8) {
		tk, err := Generate(SplitHeldout, int(task)%SplitSizes[SplitHeldout])
		require.NoError(t, err)
		env, err := New(tk, tok, Options{})
		require.NoError(t, err)
		for _, line := range append(splitLines(script), "answer x") {
			if env.Done() {
				break
			}
			gen := append(tok.Encode(line), env.StopID()) // Encode: the policy may emit any special
			gen = gen[:min(len(gen), env.Budget())]
			_, _, err := env.Step(gen, nil)
			require.NoError(t, err)
		}
		r := env.Rollout("fuzz")
		require.Empty(t, rollout.Validate(r, rollout.ReadOptions{VocabSize: tok.VocabSize()}))
		require.LessOrEqual(t, len(r.Tokens), 256)
		require.True(t, r.Reward == 0 || r.Reward == 1)
	})
}

// FuzzEvalExpr: the calculator never panics and agrees with itself on a sum of parts.
func FuzzEvalExpr(f *testing.F) {
	for _, s := range []string{"1+2*3", "-(4)/2", "((", "9999999999*9", "7/0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := evalExpr(s)
		if err == nil {
			w, err := evalExpr("(" + s + ")+0")
			require.NoError(t, err)
			require.Equal(t, v, w)
		}
	})
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
