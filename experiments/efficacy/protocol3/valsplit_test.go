package protocol3

import (
	"bytes"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestValidationSplitIsDisjoint checks that the 200 validation tasks a warm start
// may evaluate on (attempt 10: all of them) share no task with the 250 held-out gate
// tasks, the 4,000 train tasks the demonstrations and copy curricula are drawn from,
// or the 64 train tasks of G3's mixed groups (Config().Tasks(1, 1)).
func TestValidationSplitIsDisjoint(t *testing.T) {
	key := func(t toolworld.Task) string {
		return fmt.Sprint(t.Prompt, t.Answer, slices.Sorted(maps.Keys(t.Files)), t.Files, t.KV)
	}
	val, err := toolworld.Tasks(toolworld.SplitValidation, toolworld.SplitSizes[toolworld.SplitValidation])
	require.NoError(t, err)
	require.Len(t, val, 200)
	seen := map[string]string{}
	for _, v := range val {
		seen[key(v)] = v.ID
	}
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	train, err := toolworld.Tasks(toolworld.SplitTrain, max(DefaultWarmStart().Demos, DefaultCopy().Tasks))
	require.NoError(t, err)
	mixed, err := Config().Tasks(1, 1)
	require.NoError(t, err)
	for _, set := range [][]toolworld.Task{held, train, mixed} {
		for _, task := range set {
			if id, ok := seen[key(task)]; ok {
				t.Fatalf("validation task %s equals %s", id, task.ID)
			}
		}
	}
}

// TestWarmStartValTasksBounds checks that a validation count the split cannot hold
// is an error naming the field (toolworld.Tasks would cut 250 to 200 silently), and
// so is a band that is not a range; both before any model is opened.
func TestWarmStartValTasksBounds(t *testing.T) {
	for _, tc := range []struct {
		set  func(*WarmStartConfig)
		want string
	}{
		{func(c *WarmStartConfig) { c.ValTasks = 250 }, "val_tasks 250: want 1–200"},
		{func(c *WarmStartConfig) { c.ValTasks = 0 }, "val_tasks 0: want 1–200"},
		{func(c *WarmStartConfig) { c.MarginTasks = 201 }, "margin_tasks 201: want 1–200"},
		{func(c *WarmStartConfig) { c.Band = Band{Lo: 0.42, Hi: 0.33} }, "band 0.42–0.33"},
	} {
		cfg := DefaultWarmStart()
		cfg.Init, cfg.Out = filepath.Join(t.TempDir(), "missing"), t.TempDir()
		tc.set(&cfg)
		_, err := WarmStart(t.Context(), nil, cfg, func(string) {})
		require.ErrorContains(t, err, tc.want)
	}
}

// TestBand checks the band's reading and the keeping and stopping rules inside it:
// with attempt 10's band (33–42%) a mid-band eval is kept over one at 44% with a
// larger margin, which G3's band (30–45%) would keep.
func TestBand(t *testing.T) {
	b, err := ParseBand("0.33, 0.42")
	require.NoError(t, err)
	require.Equal(t, Band{Lo: 0.33, Hi: 0.42}, b)
	for _, bad := range []string{"0.33", "a,0.4", "0.3,b", "0.5,0.4", "-0.1,0.4", "0.3,1.5"} {
		_, err := ParseBand(bad)
		require.Error(t, err, bad)
	}
	mid := ValPoint{Success: 0.38, Margin: 4, HintRight: 0.7, HintSuccess: 0.6, NoneSuccess: 0.38}
	edge := ValPoint{Success: 0.44, Margin: 6, HintRight: 0.7, HintSuccess: 0.6, NoneSuccess: 0.44}
	require.True(t, b.MarginBetter(mid, edge))
	require.False(t, b.MarginBetter(edge, mid))
	require.True(t, MarginBetter(edge, mid), "G3's band keeps the larger margin")
	require.True(t, b.GateBetter(mid, edge))
	require.True(t, GateProxy(edge))
	require.False(t, b.GateProxy(edge), "44% is outside 33–42%")
	require.True(t, b.GateProxy(mid))
	var zero WarmStartConfig
	require.Equal(t, G3Band, zero.band())
	// With Mix the band reads MixSuccess: 44% raw, 38% weighted is inside 33–42%.
	b.Mix = true
	require.True(t, b.Holds(ValPoint{Success: 0.44, MixSuccess: 0.38}))
	require.False(t, b.Holds(ValPoint{Success: 0.38, MixSuccess: 0.44}))
}

// TestMixSuccess checks the held-out family mix (its 250 tasks' families) and the
// weighting: attempt 9d's kept model's greedy success per family on the 200
// validation tasks (82/200 = 41.0% raw) weighs to 43.5% at held-out's mix.
func TestMixSuccess(t *testing.T) {
	mix, err := HeldoutMix()
	require.NoError(t, err)
	want := map[string]float64{"read": 51, "sum": 48, "lookup": 49, "store": 49, "chain": 27, "chainset": 26}
	require.Len(t, mix, len(want))
	for f, n := range want {
		require.InDelta(t, n/250, mix[f], 1e-12, f)
	}
	by := map[string]float64{"read": 29.0 / 34, "sum": 16.0 / 53, "lookup": 7.0 / 40, "store": 16.0 / 43, "chain": 12.0 / 16, "chainset": 2.0 / 14}
	require.InDelta(t, 0.435, MixSuccess(by, mix), 0.0005)
	require.InDelta(t, 0.5, MixSuccess(map[string]float64{"chain": 1, "chainset": 0}, mix), 0.02, "families absent are left out")
	require.Zero(t, MixSuccess(nil, mix))
}

// TestWarmStartLiveSibling checks that every validation eval runs live sibling as
// well as none and hint, and records it: the kept eval's counts equal those of a
// live eval of the written model on the same tasks, and the log line names them.
func TestWarmStartLiveSibling(t *testing.T) {
	backend, cfg := tinyCopyWarmStart(t)
	cfg.Copy.Tasks, cfg.Copy.PerBatch = 16, 4
	cfg.Steps, cfg.ValTasks, cfg.Band = 1, 4, Band{Lo: 0, Hi: 0.5}
	var lines []string
	res, err := WarmStart(t.Context(), backend, cfg, func(s string) { lines = append(lines, s); t.Log(s) })
	require.NoError(t, err)
	require.Equal(t, cfg.Band, res.Config.Band)
	p, err := efficacy.OpenPolicy(backend, cfg.Out)
	require.NoError(t, err)
	val, err := toolworld.Tasks(toolworld.SplitValidation, cfg.ValTasks)
	require.NoError(t, err)
	sib, _, err := efficacy.LiveEval(t.Context(), p, val, cfg.LiveWorld, efficacy.LiveSibling, 0, 0)
	require.NoError(t, err)
	k := res.Kept
	t.Logf("direct live sibling: %+v", sib)
	require.Positive(t, sib.Slips, "the tiny model slips")
	require.Equal(t, []int{sib.Slips, sib.NextRight, sib.After}, []int{k.SiblingSlips, k.SiblingNext, k.SiblingAfter})
	require.Equal(t, sib.Success, k.SiblingSuccess)
	var png bytes.Buffer // the curve draws the sibling's line, its NaN rate left out
	require.NoError(t, PlotCopyCurve(&png, res.Validation, res.Steps, "test"))
	log := strings.Join(lines, "\n")
	for _, v := range res.Validation {
		require.Contains(t, log, fmt.Sprintf("step %d loss %.3f validation success %.1f%% of 4 (held-out mix %.1f%%);", v.Step, v.Loss, 100*v.Success, 100*v.MixSuccess))
		require.Contains(t, log, fmt.Sprintf("sibling %.1f%% (next right %d/%d)", 100*v.SiblingSuccess, v.SiblingNext, v.SiblingAfter))
	}
}

// TestWarmStartKeepByHint checks attempt 10's keeping rule on a tiny model: every
// eval runs (no ceiling, no patience stop), and the kept step is the best by
// GateBetter in the band.
func TestWarmStartKeepByHint(t *testing.T) {
	backend, cfg := tinyCopyWarmStart(t)
	cfg.Copy.Tasks, cfg.Copy.PerBatch = 16, 4
	cfg.KeepByMargin, cfg.KeepByHint, cfg.Patience = false, true, 1
	cfg.ValTasks, cfg.Band = 3, Band{Lo: 0.33, Hi: 0.41, Mix: true}
	res, err := WarmStart(t.Context(), backend, cfg, func(s string) { t.Log(s) })
	require.NoError(t, err)
	require.Len(t, res.Validation, 3, "no patience stop with KeepByHint")
	best := res.Validation[0]
	for _, v := range res.Validation[1:] {
		if cfg.Band.GateBetter(v, best) {
			best = v
		}
	}
	require.Equal(t, best.Step, res.Steps)
}
