package efficacy

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestSDPOContexts runs the sdpo arm's teacher stage, the daemon's teacher.Hinter, on
// a step of scripted rollouts: a failed rollout of a task with a successful sibling
// gets the sibling (rendered by teacher.RenderSolution) and the tool's error in its
// teacher context; a failed rollout of a task without a success gets the feedback
// alone; the successful rollout gets nothing.
func TestSDPOContexts(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 2)
	require.NoError(t, err)
	a, b := tasks[0], tasks[1]
	win := efficacytest.Played(t, a, a.Solution...)
	require.EqualValues(t, 1, win.Reward)
	lose := efficacytest.Played(t, a, "cta notes.txt", a.Solution[0])
	other := efficacytest.Played(t, b, "lss")
	rolls := []*rollout.Rollout{win, lose, other}
	for i, r := range rolls {
		r.ID = []string{"win", "lose", "other"}[i]
	}
	spec, err := ArmSpec3(ArmSDPO, credit.DistillFull)
	require.NoError(t, err)
	// protocol 3's hint stage (protocol3.Hints); the sdpo arm does not read it.
	at, err := newArmTeacher(tok, spec, HintSetup{Rules: RulesWorld3, Place: PlaceRetry, Base: credit.BaseStudent})
	require.NoError(t, err)
	hints, err := at.step(t.Context(), rolls, []toolworld.Task{a, a, b}, rand.New(rand.NewPCG(1, 1)))
	require.NoError(t, err)
	require.Empty(t, hints[0], "a success gets no teacher context")

	sol, err := teacher.RenderSolution(tok, win)
	require.NoError(t, err)
	require.NotEmpty(t, hints[1])
	for _, h := range hints[1] {
		require.Equal(t, sol, h.Context.Sibling, "the sibling is the successful rollout of the same task")
		require.Equal(t, "win", h.Sibling)
		require.Contains(t, h.Context.Feedback, "unknown tool", "the tool's own error")
		require.Equal(t, "sibling+feedback", h.Context.Kind())
		text, err := tok.Decode(h.Tokens)
		require.NoError(t, err)
		require.Contains(t, text, "A correct attempt:\n")
		require.Contains(t, text, a.Solution[0])
		require.Empty(t, h.Text, "no written hint")
	}
	require.NotEmpty(t, hints[2])
	for _, h := range hints[2] {
		require.Empty(t, h.Context.Sibling, "no success in its group: no sibling")
		require.Equal(t, "feedback", h.Context.Kind())
	}
	st := at.stats()
	require.Equal(t, 3, st.Rollouts)
	require.Equal(t, len(hints[1])+len(hints[2]), st.Hints)
	require.Equal(t, 1, st.Contexts[teacher.ContextSibling])
	require.Equal(t, 1, st.Contexts["sibling_no_success"])
	require.Equal(t, len(hints[1]), st.ByReason["sibling+feedback"])
}
