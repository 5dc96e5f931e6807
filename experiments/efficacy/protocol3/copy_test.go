package protocol3

import (
	"bytes"
	"fmt"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/gomlx/gomlx/backends"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestCopyDemos builds attempt 5's copy curriculum on 300 train tasks with the byte
// tokenizer and checks, for every group, what makes it a copy lesson: the variants
// share every token up to the hint's "Next: `", their hints differ only in the call
// named, each variant's only target is exactly the call its hint names (with its stop
// token), and the first variant names a call of the task's solution. (That no variant
// names the slip or an unseen word is CopyAlternatives', checked below by hand.)
func TestCopyDemos(t *testing.T) {
	tok := tokenizer.NewBytes()
	cfg := DefaultCopy()
	cfg.Tasks = 300
	groups, cnt, err := CopyDemos(tok, cfg, 512, 12, 3)
	require.NoError(t, err)
	t.Logf("%+v", cnt)
	requireSlipCounts(t, cnt, cfg.Tasks)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, cfg.Tasks)
	require.NoError(t, err)
	for _, g := range copyLessons(t, tok, groups, cnt, cfg.Variants) {
		var named []string
		var prefix []int32
		for j, l := range g {
			i := strings.LastIndex(l.ctx, "Next: `")
			require.GreaterOrEqual(t, i, 0, "%s: a hint naming a call precedes the target", l.id)
			require.True(t, strings.HasPrefix(l.ctx[i:], "Next: `"+l.call+"`."), "%s: the hint names %q: %q", l.id, l.call, l.ctx[i:])
			head := tok.EncodeText(l.ctx[:i+len("Next: `")])
			if j == 0 {
				prefix = head
			} else {
				require.Equal(t, prefix, head, "%s: the variants share everything up to the named call", l.id)
			}
			named = append(named, l.call)
		}
		requireDistinctCalls(t, named)
		// The first variant names a call of the task's solution (the one it needs next).
		var n int
		_, err := fmt.Sscanf(g[0].id, "copy3-%05d-0", &n)
		require.NoError(t, err)
		require.True(t, slices.ContainsFunc(tasks[n].Solution, func(c string) bool { return efficacy.SameCall(c, named[0]) }),
			"%s: the first variant names a call of the solution: %q", g[0].id, named[0])
	}
}

// lesson is one rollout of a copy curriculum's group, read back: its ID, its target
// (the call, chat markers stripped) and the decoded context before the target.
type lesson struct{ id, call, ctx string }

// copyLessons checks what every copy curriculum's groups share and reads them back:
// each group holds 2..variants rollouts, each rollout's target is one contiguous span
// holding a call, and the rollouts add up to cnt.Rollouts.
func copyLessons(t *testing.T, tok tokenizer.Tokenizer, groups [][]credit.Sequence, cnt CopyCounts, variants int) [][]lesson {
	t.Helper()
	decode := func(ids []int32) string {
		s, err := tok.Decode(ids)
		require.NoError(t, err)
		return s
	}
	out := make([][]lesson, len(groups))
	rollouts := 0
	for gi, g := range groups {
		require.GreaterOrEqual(t, len(g), 2)
		require.LessOrEqual(t, len(g), variants)
		rollouts += len(g)
		for _, r := range g {
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
			require.GreaterOrEqual(t, first, 0, "%s: a target", r.ID)
			call := strings.TrimSpace(efficacy.StripMarkers(decode(ids)))
			require.NotEmpty(t, call, r.ID)
			out[gi] = append(out[gi], lesson{id: r.ID, call: call, ctx: decode(r.Tokens[:first])})
		}
	}
	require.Equal(t, cnt.Rollouts, rollouts)
	return out
}

// requireSlipCounts checks the counts of a curriculum with one slip a task: every task
// gives a group or is skipped, most give one, and both failed and silent slips occur.
func requireSlipCounts(t *testing.T, cnt CopyCounts, tasks int) {
	t.Helper()
	require.Equal(t, tasks, cnt.Groups+cnt.Skipped)
	require.Greater(t, cnt.Groups, tasks/2, "most tasks give a group")
	require.Positive(t, cnt.Failed)
	require.Less(t, cnt.Failed, cnt.Groups, "failed and silent slips both")
}

// requireDistinctCalls checks that no two variants of a group hold the same call.
func requireDistinctCalls(t *testing.T, calls []string) {
	t.Helper()
	for j := range calls {
		for k := range j {
			require.False(t, efficacy.SameCall(calls[j], calls[k]), "%v: each variant holds another call", calls)
		}
	}
}

// TestCopyAlternatives checks the alternatives on a hand-built episode: after `ls docs`
// printed three files and a slip `cat docs/cod.txt`, the hint may name the other files
// of docs/ (seen) but never the slip, the right call or a word the prefix has not shown.
func TestCopyAlternatives(t *testing.T) {
	task := toolworld.Task{ID: "t", Prompt: "What does docs/cow.txt say?", Answer: "42",
		Files:    map[string]string{"docs/cow.txt": "42", "docs/owl.txt": "7", "docs/cod.txt": "9", "tmp/bee.txt": "3"},
		Solution: []string{"ls docs", "cat docs/cow.txt", "answer 42"}}
	turns := []efficacy.Turn{{Call: "ls docs", Out: "cod.txt\ncow.txt\nowl.txt"}, {Call: "cat docs/cod.txt", Out: "9"}}
	got := CopyAlternatives("cat docs/cow.txt", "cat docs/cod.txt", task, turns, 10, rand.New(rand.NewPCG(1, 2)))
	require.ElementsMatch(t, []string{"cat docs/owl.txt", "cat owl/cow.txt", "cat cow/cow.txt", "cat cod/cow.txt", "cat docs/docs.txt"}, got)
}

// TestPlotCopyCurve draws a three-eval curve and checks it is a PNG.
func TestPlotCopyCurve(t *testing.T) {
	var buf bytes.Buffer
	vals := []ValPoint{{Step: 100, Success: 0.3, HintRight: 0.05, Margin: 1}, {Step: 200, Success: 0.4, HintRight: 0.2, Margin: 2.5}, {Step: 300, Success: 0.5, HintRight: 0.4, Margin: 4}}
	require.NoError(t, PlotCopyCurve(&buf, vals, 200, "test"))
	_, err := png.Decode(&buf)
	require.NoError(t, err)
	require.Error(t, PlotCopyCurve(&buf, nil, 0, "none"))
}

// TestMarginBetter checks attempt 5's keeping order: inside G3's band first, then the
// larger margin; a tie keeps the earlier checkpoint.
func TestMarginBetter(t *testing.T) {
	in := ValPoint{Success: 0.35, Margin: 1}
	inMore := ValPoint{Success: 0.40, Margin: 2}
	over := ValPoint{Success: 0.50, Margin: 9}
	require.True(t, MarginBetter(inMore, in))
	require.False(t, MarginBetter(in, inMore))
	require.True(t, MarginBetter(in, over), "inside the band before a larger margin outside it")
	require.False(t, MarginBetter(over, in))
	require.False(t, MarginBetter(in, in), "a tie keeps the earlier")
	require.True(t, MarginBetter(ValPoint{Success: 0.6, Margin: 3}, over) == false && MarginBetter(over, ValPoint{Success: 0.6, Margin: 3}))
}

// tinyCopyWarmStart is the copy curricula's plumbing tests' warm start: 3 steps on a
// tiny untrained model, an eval every step, kept by margin, the copy curriculum's
// defaults (the caller sets its tasks, share and which groups join).
func tinyCopyWarmStart(t *testing.T) (backends.Backend, WarmStartConfig) {
	backend, dir, model := efficacytest.TinyModel(t, "model")
	cfg := DefaultWarmStart()
	cfg.Init, cfg.Out = model, filepath.Join(dir, "out")
	cfg.Demos, cfg.Batch, cfg.Steps, cfg.EvalEvery, cfg.ValTasks, cfg.LR = 16, 8, 3, 1, 2, 1e-3
	cfg.Copy = DefaultCopy()
	cfg.MarginTasks, cfg.KeepByMargin, cfg.Patience = 3, true, 1
	cfg.World = efficacy.World{MaxTokens: 192, MaxTurnTokens: 16, MaxCalls: 3}
	cfg.LiveWorld = cfg.World
	return backend, cfg
}

// TestWarmStartCopy runs attempt 5's warm start for 3 steps on a tiny untrained model
// (the plumbing, not the answer): batches mix the curriculum in (with the sibling copy
// groups, Copy.Sibling), every eval records the margin's slips, and the kept
// checkpoint is the best by MarginBetter, written to Out.
func TestWarmStartCopy(t *testing.T) {
	backend, cfg := tinyCopyWarmStart(t)
	cfg.Copy.Tasks, cfg.Copy.PerBatch, cfg.Copy.Sibling = 16, 4, true
	res, err := WarmStart(t.Context(), backend, cfg, func(s string) { t.Log(s) })
	require.NoError(t, err)
	require.Positive(t, res.Copy.Groups)
	require.Positive(t, res.SiblingCopy.Groups)
	require.Len(t, res.Validation, 3, "no patience stop with KeepByMargin")
	best := res.Validation[0]
	for _, v := range res.Validation[1:] {
		if MarginBetter(v, best) {
			best = v
		}
	}
	require.Equal(t, best.Step, res.Steps)
	_, err = os.Stat(filepath.Join(cfg.Out, "model.safetensors"))
	require.NoError(t, err)
}

// TestParseSeeds checks the seed list of -seed-list: any integers, in order; a
// repeated seed, an empty field or a word is an error that names it.
func TestParseSeeds(t *testing.T) {
	got, err := efficacy.ParseSeeds("101, 102,7")
	require.NoError(t, err)
	require.Equal(t, []int64{101, 102, 7}, got)
	for in, msg := range map[string]string{"1,1": "seed 1: repeated", "1,,2": `seed "": not an integer`, "a": `seed "a": not an integer`} {
		_, err := efficacy.ParseSeeds(in)
		require.EqualError(t, err, msg, in)
	}
	// The train tasks are the seed's own: held-out seeds see other tasks.
	cfg := Config()
	a, err := cfg.Tasks(101, 1)
	require.NoError(t, err)
	b, err := cfg.Tasks(1, 1)
	require.NoError(t, err)
	again, err := cfg.Tasks(101, 1)
	require.NoError(t, err)
	require.Equal(t, efficacy.TasksFingerprint(a), efficacy.TasksFingerprint(again))
	require.NotEqual(t, efficacy.TasksFingerprint(a), efficacy.TasksFingerprint(b))
}
