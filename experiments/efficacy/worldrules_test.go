package efficacy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestWorldAdviceFromTheToolsOwnErrors runs wrong calls in the task world and checks
// the world rules read each error the tool really printed and name the right syntax.
func TestWorldAdviceFromTheToolsOwnErrors(t *testing.T) {
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 1)
	require.NoError(t, err)
	task := tasks[0]
	for _, tc := range []struct {
		call string
		want []string
	}{
		{"cst notes", []string{"`cst` is not a tool", "you meant `cat`", "`cat DIR/FILE`"}},
		{"lx", []string{"`lx` is not a tool", "you meant `ls`"}},
		{"zzzz", []string{"`zzzz` is not a tool", "ls, cat, grep, calc, get, set"}},
		{"grep -x owl notes", []string{"`grep` has no option `-x` (only -i and -c)", "`grep PATTERN DIR/FILE`"}},
		{"cat -n notes/a.txt", []string{"`cat` takes no options", "`cat DIR/FILE`", "without `-n`"}},
		{"grep owl", []string{"Wrong number of arguments to `grep`", "`grep PATTERN DIR/FILE`"}},
		{"cat", []string{"Wrong number of arguments to `cat`", "`cat DIR/FILE`"}},
		{"cat qqq/wxyz1.txt", []string{"`qqq/wxyz1.txt` does not exist", "`ls qqq` lists the files in qqq/"}},
		{"ls wxyz1", []string{"`wxyz1` does not exist", "`ls` lists the directories"}},
		{"grep owl qqq/wxyz1.txt", []string{"`qqq/wxyz1.txt` does not exist", "then call `grep` on one of them"}},
		{"calc seven*3", []string{"`calc` reads digits, not words", "`calc A+B`"}},
		{"calc 3+", []string{"`calc` reads digits, not words"}},
		{"get wxyz1", []string{"There is no key `wxyz1`", "`get KEY`"}},
		{"set k seven", []string{"`set` stores an integer written in digits", "`set KEY N`"}},
	} {
		r := efficacytest.Played(t, task, tc.call)
		k := slicesIndex(r, rollout.KindToolCall)
		require.GreaterOrEqual(t, k, 0, tc.call)
		require.Equal(t, rollout.StatusError, r.Segments[k+1].Status, "%q fails in the task world", tc.call)
		hs, err := NewWorldRules(tokenizer.NewBytes()).Hints(t.Context(), cutAfter(r, k), []teacher.Selection{{Segment: k}})
		require.NoError(t, err)
		for _, w := range tc.want {
			require.Contains(t, hs[0].Text, w, tc.call)
		}
	}
	// A call that worked gets no hint.
	r := efficacytest.Played(t, task, "ls")
	k := slicesIndex(r, rollout.KindToolCall)
	hs, err := NewWorldRules(tokenizer.NewBytes()).Hints(t.Context(), r, []teacher.Selection{{Segment: k}})
	require.NoError(t, err)
	require.Empty(t, hs[0].Text)
}

func slicesIndex(r *rollout.Rollout, kind rollout.SegmentKind) int {
	for i, s := range r.Segments {
		if s.Kind == kind {
			return i
		}
	}
	return -1
}

// TestWorldRulesOnNoisyAgents: every mistake the noisy agents make (the warm start's
// demonstrations) gets a hint, the hint never gives the task away, and after a
// misspelt tool it names the tool the agent's corrected call then uses.
func TestWorldRulesOnNoisyAgents(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 120)
	require.NoError(t, err)
	w := NewWorldRules(tok)
	failed, typos := 0, 0
	for i, task := range tasks {
		env, err := toolworld.New(task, tok, toolworld.Options{MaxTokens: 1024})
		require.NoError(t, err)
		_, err = toolworld.Play(env, toolworld.NewNoisy(0.5, uint64(i)), 16)
		require.NoError(t, err)
		r := env.Rollout("n")
		for k, s := range r.Segments {
			if s.Kind != rollout.KindToolCall || r.Segments[k+1].Status != rollout.StatusError {
				continue
			}
			failed++
			hs, err := w.Hints(t.Context(), cutAfter(r, k), []teacher.Selection{{Segment: k}})
			require.NoError(t, err)
			text := hs[0].Text
			require.NotEmpty(t, text, "task %s segment %d", task.ID, k)
			require.False(t, LeaksAnswer(text, task), "task %s: %q", task.ID, text)
			if next := nextCall(r, k); next != "" && strings.Contains(text, "is not a tool; you meant") {
				typos++
				require.Contains(t, text, "`"+next+"`", "task %s: the corrected call uses the tool named", task.ID)
			}
		}
	}
	require.Greater(t, failed, 50)
	require.Positive(t, typos)
}

// nextCall returns the tool of the first call after segment k.
func nextCall(r *rollout.Rollout, k int) string {
	for _, s := range r.Segments[k+1:] {
		if s.Kind == rollout.KindToolCall {
			return s.Tool
		}
	}
	return ""
}

// TestHinterRetryPlacement: with PlaceRetry a failed call's hint goes before the next
// policy turn and scores that turn; with PlaceFailed (protocol 1) it scores the
// failed call itself.
func TestHinterRetryPlacement(t *testing.T) {
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 1)
	require.NoError(t, err)
	task := tasks[0]
	r := efficacytest.Played(t, task, "cst notes", "ls")
	r.LogProbs = make([]float32, len(r.Tokens)) // sampled, as in training
	k := slicesIndex(r, rollout.KindToolCall)
	for _, tc := range []struct {
		setup  HintSetup
		target int
	}{{Protocol1Hints, k}, {Protocol2Hints, k + 2}} {
		h, err := NewHinterWith(tokenizer.NewBytes(), tc.setup)
		require.NoError(t, err)
		hs, err := h.Hints(t.Context(), r, task)
		require.NoError(t, err)
		require.Len(t, hs, 1, "%+v", tc.setup)
		require.Equal(t, tc.target, hs[0].Segment, "%+v", tc.setup)
		require.Equal(t, r.Segments[tc.target].Start, hs[0].InsertAt, "the hint opens the scored turn")
		require.Equal(t, r.Segments[tc.target].End, hs[0].End)
		require.NotEmpty(t, hs[0].Tokens)
		require.NotEmpty(t, hs[0].Empty)
	}
	// No policy turn after the failed call: no retry hint, counted.
	env, err := toolworld.New(task, tokenizer.NewBytes(), toolworld.Options{MaxTokens: 1024})
	require.NoError(t, err)
	_, err = toolworld.Play(env, &efficacytest.Script{Lines: []string{"cst notes"}}, 1)
	require.NoError(t, err)
	last := env.Rollout("u")
	h, err := NewHinterWith(tokenizer.NewBytes(), Protocol2Hints)
	require.NoError(t, err)
	hs, err := h.Hints(t.Context(), last, task)
	require.NoError(t, err)
	require.Empty(t, hs)
	require.Equal(t, 1, h.Stats.NoRetry)
	require.Error(t, HintSetup{Rules: "world", Place: "later"}.Validate())
	require.Error(t, HintSetup{Rules: "oracle", Place: "retry"}.Validate())
}

// TestWorldRulesLeakGuardStillDrops: a failed call that names the file the solution
// reads (in a wrong directory) gets a world-rules hint that repeats that name; the
// answer guard drops it and counts it.
func TestWorldRulesLeakGuardStillDrops(t *testing.T) {
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 50)
	require.NoError(t, err)
	for _, task := range tasks {
		var file string
		for path := range task.Files {
			if strings.Contains(strings.Join(task.Solution, "\n"), path) {
				file = path[strings.LastIndexByte(path, '/')+1:]
			}
		}
		if file == "" {
			continue
		}
		r := efficacytest.Played(t, task, "cat qqq/"+file, "ls")
		r.LogProbs = make([]float32, len(r.Tokens))
		h, err := NewHinterWith(tokenizer.NewBytes(), Protocol2Hints)
		require.NoError(t, err)
		hs, err := h.Hints(t.Context(), r, task)
		require.NoError(t, err)
		require.Empty(t, hs, "the hint names %s", file)
		require.Equal(t, 1, h.Stats.AnswerLeaks)
		return
	}
	t.Fatal("no train task reads a file")
}
