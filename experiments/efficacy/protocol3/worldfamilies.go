package protocol3

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// Families are toolworld's task families, in its order.
var Families = []string{"read", "sum", "lookup", "store", "chain", "chainset"}

// KeepFamilies returns the world demonstrations (Demos of train tasks 0..n-1, IDs
// "demo3-NNNNN") whose task is of one of families, and how many it kept of each
// (attempt 7: the world share drawn from the families G3 found below 15%). An
// unknown family, no family, a demonstration whose ID names no train task, or a
// list that keeps nothing is an error.
func KeepFamilies(demos []credit.Sequence, n int, families []string) ([]credit.Sequence, map[string]int, error) {
	if len(families) == 0 {
		return nil, nil, fmt.Errorf("keep families: no family named (toolworld has %s)", strings.Join(Families, ", "))
	}
	for _, f := range families {
		if !slices.Contains(Families, f) {
			return nil, nil, fmt.Errorf("keep families: %q is not a task family (toolworld has %s)", f, strings.Join(Families, ", "))
		}
	}
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, n)
	if err != nil {
		return nil, nil, fmt.Errorf("keep families: %w", err)
	}
	var out []credit.Sequence
	kept := map[string]int{}
	for _, d := range demos {
		i, err := strconv.Atoi(strings.TrimPrefix(d.ID, "demo3-"))
		if !strings.HasPrefix(d.ID, "demo3-") || err != nil || i < 0 || i >= len(tasks) {
			return nil, nil, fmt.Errorf("keep families: demonstration %q names no train task of 0..%d", d.ID, len(tasks)-1)
		}
		if f := tasks[i].Family; slices.Contains(families, f) {
			out = append(out, d)
			kept[f]++
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("keep families: no demonstration of %s among %d", strings.Join(families, ", "), len(demos))
	}
	return out, kept, nil
}
