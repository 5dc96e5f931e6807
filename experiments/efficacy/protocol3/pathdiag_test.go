package protocol3

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// playLines plays the command lines on a real episode of t in protocol 3's world and
// traces it as DiagnosePaths does.
func playLines(t *testing.T, task toolworld.Task, lines []string) PathTrace {
	t.Helper()
	tok := tokenizer.NewBytes()
	w := World()
	env, err := toolworld.New(task, tok, toolworld.Options{MaxTokens: w.MaxTokens, MaxCalls: w.MaxCalls})
	require.NoError(t, err)
	var turns []efficacy.Turn
	for _, line := range lines {
		if env.Done() {
			break
		}
		_, _, err := env.Step(append(tok.EncodeText(line), env.StopID()), nil)
		require.NoError(t, err)
		out, failed := env.Last()
		if toolworld.ParseCall(line).Name == toolworld.AnswerCommand {
			out, failed = "", false
		}
		turns = append(turns, efficacy.Turn{Call: line, Out: out, Failed: failed})
	}
	require.True(t, env.Done(), "the lines end the episode")
	calls, _ := env.Calls()
	return TracePath(task, turns, env.Reward(), env.Truncated(), calls, w.MaxCalls)
}

func TestTracePath(t *testing.T) {
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	var task toolworld.Task
	for _, h := range held {
		if h.Family == "chainset" {
			task = h
			break
		}
	}
	require.Equal(t, "chainset", task.Family)
	sol := task.Solution // ls, cat, get, calc, set, answer
	require.Len(t, sol, 6)

	ok := playLines(t, task, sol)
	require.Equal(t, EndSuccess, ok.End)
	require.Equal(t, len(sol)-1, ok.Reached)
	require.Empty(t, ok.Stuck)

	// The chain's calls, then the answer without the set: answered, stuck at set.
	noSet := playLines(t, task, append(append([]string{}, sol[:4]...), sol[5]))
	require.Equal(t, EndAnswered, noSet.End)
	require.Equal(t, 4, noSet.Reached)
	require.Equal(t, "set", noSet.Stuck)
	require.Equal(t, sol[5], noSet.Answer)

	// The first call repeated until the cap: stuck at the second (cat).
	var rep []string
	for range World().MaxCalls {
		rep = append(rep, sol[0])
	}
	capped := playLines(t, task, rep)
	require.Equal(t, EndCallCap, capped.End)
	require.Equal(t, 1, capped.Reached)
	require.Equal(t, "cat", capped.Stuck)
	require.Equal(t, World().MaxCalls, capped.Calls)

	// A wrong set value is a silent slip; then the right answer: stuck at set, one slip.
	wrongSet := playLines(t, task, append(append([]string{}, sol[:4]...), toolworld.ParseCall(sol[4]).Name+" "+toolworld.ParseCall(sol[4]).Args[0]+" 1", sol[5]))
	require.Equal(t, EndAnswered, wrongSet.End)
	require.Equal(t, "set", wrongSet.Stuck)
	require.Equal(t, 1, wrongSet.Slips)

	got := Breakdown([]PathTrace{ok, noSet, capped, wrongSet})
	require.Equal(t, []PathCount{{Stuck: "set", End: EndAnswered, N: 2}, {Stuck: "cat", End: EndCallCap, N: 1}}, got)
}
