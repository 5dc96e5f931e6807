package toolworld

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
)

// TestHintMatchesTeacherInsertion plays a failed call and the right one twice, once
// with a hint before the corrected call: the hinted rollout must equal the plain one
// with the teacher's template inserted at that policy turn's start, so that hint
// demonstrations look to the model exactly like the teacher pass's input.
func TestHintMatchesTeacherInsertion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tok    tokenizer.Tokenizer
		preset string
	}{
		{"bytes", tokenizer.NewBytes(), "bytes"},
		{"chatml", qwen3(t), "chatml"},
	} {
		task := heldoutTask(t, "read")
		const hint = "list the directory first."
		play := func(withHint bool) *rollout.Rollout {
			env, err := New(task, tc.tok, Options{MaxTokens: 512})
			require.NoError(t, err)
			for i, line := range append([]string{"cat tmp/owl.txt"}, task.Solution...) {
				if i == 1 && withHint {
					ctx, err := env.Hint(hint)
					require.NoError(t, err)
					require.Equal(t, env.Tokens(), ctx)
				}
				_, _, err := env.Step(append(tc.tok.EncodeText(line), env.StopID()), nil)
				require.NoError(t, err)
			}
			require.Equal(t, float32(1), env.Reward())
			return env.Rollout("r")
		}
		plain, hinted := play(false), play(true)
		require.Empty(t, rollout.Validate(hinted, rollout.ReadOptions{VocabSize: tc.tok.VocabSize()}))

		in, err := teacher.NewInserter(teacher.Template{Preset: tc.preset, Label: HintLabel}, tc.tok, 0)
		require.NoError(t, err)
		wrapped, err := in.Wrap(hint)
		require.NoError(t, err)
		turn := plain.Segments[4] // system, user, failed call, its result, the corrected call
		require.Equal(t, rollout.KindToolCall, turn.Kind)
		// The teacher pass scores y_<a, hint, y_a… (xla.ScoreHinted's splice).
		spliced := append(append(append([]int32(nil), plain.Tokens[:turn.Start]...), wrapped...), plain.Tokens[turn.Start:]...)
		require.Equal(t, hinted.Tokens, spliced, tc.name)
		require.Equal(t, "user", hinted.Segments[4].KindName)
		require.Equal(t, turn.Start, hinted.Segments[4].Start)
	}
}

func TestHintErrors(t *testing.T) {
	tok := tokenizer.NewBytes()
	env, err := New(heldoutTask(t, "read"), tok, Options{MaxTokens: 120})
	require.NoError(t, err)
	_, err = env.Hint(string(make([]byte, 100)))
	require.ErrorIs(t, err, ErrNoRoom)
	require.Len(t, env.Rollout("r").Segments, 2, "a refused hint leaves nothing behind")
	_, _, err = env.Step(append(tok.EncodeText("answer 1"), env.StopID()), nil)
	require.NoError(t, err)
	_, err = env.Hint("x")
	require.ErrorContains(t, err, "the episode is over")
}

// hintingNoisy is a Noisy agent whose hints name the failed output's first word.
type hintingNoisy struct{ *Noisy }

func (h hintingNoisy) Hint(env *Env) string {
	out, _ := env.Last()
	return "fix " + ParseCall(out).Name
}

func TestPlayInsertsHintsAfterFailedCalls(t *testing.T) {
	tok := tokenizer.NewBytes()
	hinted := 0
	for i, task := range mustTasks(t, SplitTrain, 40) {
		env, err := New(task, tok, Options{MaxTokens: 512})
		require.NoError(t, err)
		_, err = Play(env, hintingNoisy{NewNoisy(0.4, uint64(i))}, 50)
		require.NoError(t, err)
		r := env.Rollout("r")
		require.Empty(t, rollout.Validate(r, rollout.ReadOptions{VocabSize: tok.VocabSize()}))
		for k, s := range r.Segments {
			if s.Kind == rollout.KindToolResult && s.Status == rollout.StatusError && k+1 < len(r.Segments) {
				next := r.Segments[k+1]
				require.Equal(t, rollout.KindUser, next.Kind, "%s: a hint follows the failed call", task.ID)
				text, _ := tok.Decode(r.Tokens[next.Start:next.End])
				require.Contains(t, text, "<|user|>"+HintLabel+"fix ")
				hinted++
			}
		}
	}
	require.Greater(t, hinted, 5)
}

func mustTasks(t *testing.T, split string, n int) []Task {
	t.Helper()
	tasks, err := Tasks(split, n)
	require.NoError(t, err)
	return tasks
}

// TestRulesTeacherReadsTheWorld checks that the rules teacher understands the world's
// failed calls: their error texts and the system prompt's tool list.
func TestRulesTeacherReadsTheWorld(t *testing.T) {
	tok := tokenizer.NewBytes()
	rules := teacher.NewRulesTeacher(teacher.DefaultRulesConfig(), tok)
	for _, tc := range []struct {
		call, advice string
	}{
		{"cta tmp/fox.txt", "that tool does not exist"},
		{"cat tmp/owl.txt", "does not exist. Find the right one first (for example with `grep`)"},
		{"get owl", "does not exist. Find the right one first"},
		{"ls -l tmp", "its arguments are malformed"},
		{"calc fox+1", "its arguments are malformed"},
		{"set owl ten", "its arguments are malformed"},
	} {
		env, err := New(heldoutTask(t, "read"), tok, Options{})
		require.NoError(t, err)
		_, _, err = env.Step(append(tok.EncodeText(tc.call), env.StopID()), nil)
		require.NoError(t, err)
		r := env.Rollout("r")
		seg := r.Segments[2]
		require.Equal(t, rollout.KindToolCall, seg.Kind)
		hints, err := rules.Hints(t.Context(), r, []teacher.Selection{{Segment: 2, InsertAt: seg.Start, End: seg.End, Source: 3}})
		require.NoError(t, err)
		require.Contains(t, hints[0].Text, tc.advice, tc.call)
		require.Contains(t, hints[0].Text, "never", "%s: the unused tools of the system prompt are named", tc.call)
	}
}
