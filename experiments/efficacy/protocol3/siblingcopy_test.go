package protocol3

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestSiblingCopyDemos builds the sibling copy curriculum on 300 train tasks with the
// byte tokenizer and checks, for every group, what makes it a copy lesson for G1's
// sibling: the context holds one sibling turn (efficacy.SiblingText's frame) showing
// the task's solution except at one line, the variants share every token up to that
// line, each variant's only target is exactly the call its sibling shows at that line
// (with its stop token), the first variant's is the solution's call there, and the
// variants' calls differ.
func TestSiblingCopyDemos(t *testing.T) {
	tok := tokenizer.NewBytes()
	cfg := DefaultCopy()
	cfg.Tasks = 300
	groups, cnt, err := SiblingCopyDemos(tok, cfg, 512, 12, 3)
	require.NoError(t, err)
	t.Logf("%+v", cnt)
	requireSlipCounts(t, cnt, cfg.Tasks)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, cfg.Tasks)
	require.NoError(t, err)
	const head, tail = "A correct attempt:\n", "\nNow solve it yourself."
	for _, g := range copyLessons(t, tok, groups, cnt, cfg.Variants) {
		var n int
		_, err := fmt.Sscanf(g[0].id, "sibcopy3-%05d-0", &n)
		require.NoError(t, err)
		sol := tasks[n].Solution
		var shown []string
		var prefix string
		for j, l := range g {
			require.Equal(t, 1, strings.Count(l.ctx, head), "%s: one sibling turn", l.id)
			i := strings.Index(l.ctx, head)
			end := strings.Index(l.ctx[i:], tail)
			require.Positive(t, end, l.id)
			lines := strings.Split(l.ctx[i+len(head):i+end], "\n")
			require.Len(t, lines, len(sol), "%s: the sibling shows one call per solution call", l.id)
			diff := -1
			for k, line := range lines {
				if line != sol[k] {
					require.Equal(t, -1, diff, "%s: the sibling differs from the solution at one line at most: %q", l.id, lines)
					diff = k
				}
			}
			if j == 0 {
				require.Equal(t, -1, diff, "%s: the first variant's sibling is the solution", l.id)
				at := slicesIndex(sol, l.call)
				require.GreaterOrEqual(t, at, 0, "%s: the first variant's target is a call of the solution: %q", l.id, l.call)
				prefix = l.ctx[:i+len(head)+len(strings.Join(sol[:at], "\n"))]
			} else {
				require.GreaterOrEqual(t, diff, 0, "%s: an alternative's sibling differs from the solution", l.id)
				require.Equal(t, l.call, lines[diff], "%s: the target is the call the sibling shows in place of the solution's", l.id)
				require.True(t, strings.HasPrefix(l.ctx, prefix), "%s: the variants share everything up to the shown call", l.id)
			}
			require.NotContains(t, l.ctx[i+end:], "<|tool|>", "%s: the target follows the sibling turn", l.id)
			shown = append(shown, l.call)
		}
		requireDistinctCalls(t, shown)
	}
}

func slicesIndex(calls []string, call string) int {
	for i, c := range calls {
		if efficacy.SameCall(c, call) {
			return i
		}
	}
	return -1
}

// TestSiblingShareOf checks the share of sibling groups pooled: the first ones, rounded
// down, and every group for a share of 0 or 1.
func TestSiblingShareOf(t *testing.T) {
	groups := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	require.Equal(t, groups, SiblingShareOf(groups, 0))
	require.Equal(t, groups, SiblingShareOf(groups, 1))
	require.Equal(t, []int{0, 1}, SiblingShareOf(groups, 0.2))
	require.Equal(t, []int{0, 1, 2}, SiblingShareOf(groups, 0.35))
	require.Empty(t, SiblingShareOf(groups, 0.05))
}
