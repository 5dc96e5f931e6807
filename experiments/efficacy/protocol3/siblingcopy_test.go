package protocol3

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
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
	require.Equal(t, cfg.Tasks, cnt.Groups+cnt.Skipped)
	require.Greater(t, cnt.Groups, cfg.Tasks/2, "most tasks give a group")
	require.Positive(t, cnt.Failed)
	require.Less(t, cnt.Failed, cnt.Groups, "failed and silent slips both")
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, cfg.Tasks)
	require.NoError(t, err)
	decode := func(ids []int32) string {
		s, err := tok.Decode(ids)
		require.NoError(t, err)
		return s
	}
	target := func(r credit.Sequence) (string, int) {
		first, n := -1, 0
		var ids []int32
		for p, m := range r.Trainable {
			if m {
				if first < 0 {
					first = p
				}
				require.Equal(t, first+n, p, "%s: one contiguous target", r.ID)
				ids = append(ids, r.Tokens[p])
				n++
			}
		}
		return decode(ids), first
	}
	const head, tail = "A correct attempt:\n", "\nNow solve it yourself."
	rollouts := 0
	for _, g := range groups {
		require.GreaterOrEqual(t, len(g), 2)
		require.LessOrEqual(t, len(g), cfg.Variants)
		rollouts += len(g)
		var n int
		_, err := fmt.Sscanf(g[0].ID, "sibcopy3-%05d-0", &n)
		require.NoError(t, err)
		sol := tasks[n].Solution
		var shown []string
		var prefix string
		for j, r := range g {
			text, at := target(r)
			call := strings.TrimSpace(efficacy.StripMarkers(text))
			require.NotEmpty(t, call, r.ID)
			ctx := decode(r.Tokens[:at])
			require.Equal(t, 1, strings.Count(ctx, head), "%s: one sibling turn", r.ID)
			i := strings.Index(ctx, head)
			end := strings.Index(ctx[i:], tail)
			require.Positive(t, end, r.ID)
			lines := strings.Split(ctx[i+len(head):i+end], "\n")
			require.Len(t, lines, len(sol), "%s: the sibling shows one call per solution call", r.ID)
			diff := -1
			for k, l := range lines {
				if l != sol[k] {
					require.Equal(t, -1, diff, "%s: the sibling differs from the solution at one line at most: %q", r.ID, lines)
					diff = k
				}
			}
			if j == 0 {
				require.Equal(t, -1, diff, "%s: the first variant's sibling is the solution", r.ID)
				at := slicesIndex(sol, call)
				require.GreaterOrEqual(t, at, 0, "%s: the first variant's target is a call of the solution: %q", r.ID, call)
				prefix = ctx[:i+len(head)+len(strings.Join(sol[:at], "\n"))]
			} else {
				require.GreaterOrEqual(t, diff, 0, "%s: an alternative's sibling differs from the solution", r.ID)
				require.Equal(t, call, lines[diff], "%s: the target is the call the sibling shows in place of the solution's", r.ID)
				require.True(t, strings.HasPrefix(ctx, prefix), "%s: the variants share everything up to the shown call", r.ID)
			}
			require.NotContains(t, ctx[i+end:], "<|tool|>", "%s: the target follows the sibling turn", r.ID)
			shown = append(shown, call)
		}
		for j := range shown {
			for k := range j {
				require.False(t, efficacy.SameCall(shown[j], shown[k]), "%v: each variant shows another call", shown)
			}
		}
	}
	require.Equal(t, cnt.Rollouts, rollouts)
}

func slicesIndex(calls []string, call string) int {
	for i, c := range calls {
		if efficacy.SameCall(c, call) {
			return i
		}
	}
	return -1
}
