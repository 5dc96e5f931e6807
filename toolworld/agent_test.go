package toolworld

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/stretchr/testify/require"
)

// successRate plays every heldout task with the agent newAgent makes for it.
func successRate(t *testing.T, newAgent func(i int) Agent) (rate, toolErrorRate, truncated float64) {
	t.Helper()
	tok := tokenizer.NewBytes()
	tasks, err := Tasks(SplitHeldout, 0)
	require.NoError(t, err)
	var wins, calls, failed, cut int
	for i, task := range tasks {
		env, err := New(task, tok, Options{})
		require.NoError(t, err)
		reward, err := Play(env, newAgent(i), 50)
		require.NoError(t, err)
		require.True(t, env.Done(), "%s: the episode ends within 50 turns", task.ID)
		if reward == 1 {
			wins++
		}
		if env.Truncated() {
			cut++
		}
		c, f := env.Calls()
		calls, failed = calls+c, failed+f
	}
	n := float64(len(tasks))
	return float64(wins) / n, float64(failed) / float64(max(calls, 1)), float64(cut) / n
}

func TestOracleSolvesHeldout(t *testing.T) {
	rate, errRate, _ := successRate(t, func(int) Agent { return &Oracle{} })
	require.Equal(t, 1.0, rate)
	require.Zero(t, errRate)
}

func TestRandomAgentFails(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		rate, errRate, _ := successRate(t, func(i int) Agent { return NewRandom(seed*1000 + uint64(i)) })
		t.Logf("random seed %d: success %.3f, failed calls %.3f", seed, rate, errRate)
		require.LessOrEqual(t, rate, 0.01, "seed %d", seed)
		require.Greater(t, errRate, 0.3, "seed %d: random calls mostly fail", seed)
	}
}

func TestNoisyAgents(t *testing.T) {
	for _, tc := range []struct {
		p                float64
		minRate, maxRate float64 // success
		minErrs, maxErrs float64 // share of failed calls
	}{
		{0, 1, 1, 0, 0},
		{0.1, 0.9, 1, 0.03, 0.2},
		{0.3, 0.7, 1, 0.15, 0.4},
	} {
		rate, errRate, truncated := successRate(t, func(i int) Agent { return NewNoisy(tc.p, uint64(i)) })
		t.Logf("noisy p=%v: success %.3f, failed calls %.3f, truncated %.3f", tc.p, rate, errRate, truncated)
		require.InDelta(t, 1-truncated, rate, 1e-9, "p=%v: every episode that fits its budget recovers and succeeds", tc.p)
		require.GreaterOrEqual(t, rate, tc.minRate, "p=%v", tc.p)
		require.LessOrEqual(t, rate, tc.maxRate, "p=%v", tc.p)
		require.GreaterOrEqual(t, errRate, tc.minErrs, "p=%v", tc.p)
		require.LessOrEqual(t, errRate, tc.maxErrs, "p=%v", tc.p)
	}
}

func TestMistakesFail(t *testing.T) {
	tasks, err := Tasks(SplitHeldout, 60)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	kinds := map[string]bool{}
	for _, task := range tasks {
		for _, call := range task.Solution {
			for range 10 {
				bad := Mistake(call, rng)
				if ParseCall(call).Name == AnswerCommand {
					require.Empty(t, bad)
					continue
				}
				out, failed := newMachine(task).run(ParseCall(bad))
				require.True(t, failed, "%s: mistake %q of %q succeeded: %s", task.ID, bad, call, out)
				kinds[errorKind(out)] = true
			}
		}
	}
	require.Equal(t, map[string]bool{"unknown tool": true, "invalid option": true, "No such file": true,
		"invalid number": true, "key not found": true, "invalid value": true}, kinds)
}

// errorKind names the class of an error text.
func errorKind(out string) string {
	for _, k := range []string{"unknown tool", "invalid option", "No such file", "invalid number", "key not found", "invalid value"} {
		if strings.Contains(out, k) {
			return k
		}
	}
	return out
}
