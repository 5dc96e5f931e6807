package toolworld

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateIsDeterministic(t *testing.T) {
	for _, split := range Splits() {
		a, err := Generate(split, 7)
		require.NoError(t, err)
		b, err := Generate(split, 7)
		require.NoError(t, err)
		require.Equal(t, a, b, split)
		require.Equal(t, split+"-0007", a.ID)
	}
	// A pinned task: a change of the generator changes every split, so it must be on purpose.
	task, err := Generate(SplitHeldout, 3)
	require.NoError(t, err)
	require.Equal(t, "read", task.Family)
	require.Equal(t, "Give the number in the only file in tmp/.", task.Prompt)
	require.Equal(t, []string{"ls tmp", "cat tmp/fox.txt", "answer 10"}, task.Solution)
}

func TestGenerateErrors(t *testing.T) {
	for _, tc := range []struct {
		split string
		i     int
		want  string
	}{
		{"dev", 0, `unknown split "dev"`},
		{SplitHeldout, SplitSizes[SplitHeldout], "index 250 outside split heldout of 250 tasks"},
		{SplitValidation, -1, "index -1 outside split validation"},
		{SplitTrain, -1, "index -1 outside split train"},
	} {
		_, err := Generate(tc.split, tc.i)
		require.ErrorContains(t, err, tc.want, "%s %d", tc.split, tc.i)
	}
}

func TestSplitSizes(t *testing.T) {
	held, err := Tasks(SplitHeldout, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(held), 200)
	val, err := Tasks(SplitValidation, 0)
	require.NoError(t, err)
	require.Len(t, val, SplitSizes[SplitValidation])
	train, err := Tasks(SplitTrain, 1000)
	require.NoError(t, err)
	require.Len(t, train, 1000)
}

// taskKey is a task's content without its id: two splits must not share one.
func taskKey(t Task) string {
	return fmt.Sprint(t.Prompt, t.Answer, slices.Sorted(maps.Keys(t.Files)), t.Files, t.KV)
}

func TestSplitsAreDisjoint(t *testing.T) {
	seen := map[string]string{}
	for _, split := range Splits() {
		tasks, err := Tasks(split, 2000)
		require.NoError(t, err)
		for _, task := range tasks {
			k := taskKey(task)
			if other, ok := seen[k]; ok && other != split {
				t.Fatalf("task %s of %s equals a task of %s", task.ID, split, other)
			}
			seen[k] = split
		}
	}
}

func TestFamiliesNeedTheirCalls(t *testing.T) {
	want := map[string]int{"read": 2, "sum": 3, "lookup": 2, "store": 3, "chain": 4, "chainset": 5}
	held, err := Tasks(SplitHeldout, 0)
	require.NoError(t, err)
	count := map[string]int{}
	for _, task := range held {
		count[task.Family]++
		require.Equal(t, want[task.Family], task.Calls(), "%s (%s)", task.ID, task.Family)
		require.Equal(t, "answer "+task.Answer, task.Solution[len(task.Solution)-1], task.ID)
		require.NotContains(t, task.Prompt, task.Answer+".", "%s: the prompt gives the answer away", task.ID)
	}
	for f := range want {
		require.GreaterOrEqual(t, count[f], 10, "family %s is rare in heldout: %v", f, count)
	}
}

func TestCheck(t *testing.T) {
	task := Task{Answer: "42", WantKV: map[string]string{"owl": "42"}}
	for _, tc := range []struct {
		answer string
		kv     map[string]string
		want   float32
	}{
		{"42", map[string]string{"owl": "42"}, 1},
		{" 42 ", map[string]string{"owl": "42", "fox": "1"}, 1},
		{"42", map[string]string{"owl": "41"}, 0},
		{"42", nil, 0},
		{"41", map[string]string{"owl": "42"}, 0},
		{"", map[string]string{"owl": "42"}, 0},
	} {
		require.Equal(t, tc.want, task.Check(tc.answer, tc.kv), "answer %q kv %v", tc.answer, tc.kv)
	}
}
