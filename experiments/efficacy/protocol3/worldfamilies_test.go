package protocol3

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestKeepFamilies keeps attempt 7's world share (chain, chainset, store) from real
// demonstrations and checks it against the tasks' families read independently: every
// demonstration of those families is kept, in order, and no other.
func TestKeepFamilies(t *testing.T) {
	tok := tokenizer.NewBytes()
	const n = 300
	demos, _, err := Demos(tok, n, DefaultDemo(), 512, 12, 7)
	require.NoError(t, err)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, n)
	require.NoError(t, err)
	want := map[string]bool{"chain": true, "chainset": true, "store": true}
	var wantIDs []string
	wantCount := map[string]int{}
	for _, d := range demos {
		for i, task := range tasks {
			if d.ID == fmt.Sprintf("demo3-%05d", i) && want[task.Family] {
				wantIDs = append(wantIDs, d.ID)
				wantCount[task.Family]++
			}
		}
	}
	kept, count, err := KeepFamilies(demos, n, []string{"chain", "chainset", "store"})
	require.NoError(t, err)
	var got []string
	for _, d := range kept {
		got = append(got, d.ID)
	}
	require.Equal(t, wantIDs, got)
	require.Equal(t, wantCount, count)
	require.Positive(t, count["chainset"])
	require.Less(t, len(kept), len(demos))
	t.Logf("kept %d of %d demonstrations: %v", len(kept), len(demos), count)

	_, _, err = KeepFamilies(demos, n, []string{"chainsets"})
	require.ErrorContains(t, err, `"chainsets" is not a task family`)
	_, _, err = KeepFamilies(demos, n, nil)
	require.ErrorContains(t, err, "no family named")
	_, _, err = KeepFamilies(demos, 10, []string{"read"})
	require.ErrorContains(t, err, "names no train task")
}
