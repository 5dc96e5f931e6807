package protocol3

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// wrongTokens are the words of a slipped call that the call the task needed does not
// hold: the misspelt tool, the near-miss file, key or directory, the changed number.
func wrongTokens(slip, exp string) []string {
	var out []string
	for _, w := range efficacy.Words(slip) {
		if !slices.Contains(efficacy.Words(exp), w) && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return out
}

// requireNoQuote fails when hint holds a wrong token of slip (against exp) as a word.
func requireNoQuote(t *testing.T, hint, slip, exp string) {
	t.Helper()
	hw := efficacy.Words(hint)
	for _, w := range wrongTokens(slip, exp) {
		require.NotContains(t, hw, w, "hint %q quotes %q of the slip %q (the task needed %q)", hint, w, slip, exp)
	}
}

// TestSlipHintNeverQuotesTheSlip plays, on 300 train tasks and before each of their
// solution calls, every slip kind in the real task world — the model's own near
// misses (OwnSlip), silent slips (efficacy.SilentSlip) and toolworld.Mistake's failing calls
// (misspelt tool, bad option, missing path, a word for a number, a missing key) — and
// checks that efficacy.SlipHint (attempt 3's world rules) names no word of the slipped call
// that the right call does not hold.
func TestSlipHintNeverQuotesTheSlip(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 300)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(27, 3))
	kinds := map[string]int{}
	for _, task := range tasks {
		for at, exp := range task.Solution {
			if toolworld.ParseCall(exp).Name == toolworld.AnswerCommand {
				continue
			}
			slips := map[string]string{"own": OwnSlip(exp, task, rng.IntN), "silent": efficacy.SilentSlip(exp, task, rng.IntN)}
			for i := range 3 {
				slips["mistake"+string(rune('0'+i))] = toolworld.Mistake(exp, rng)
			}
			for kind, slip := range slips {
				if slip == "" || efficacy.SameCall(slip, exp) {
					continue
				}
				env, err := toolworld.New(task, tok, toolworld.Options{MaxTokens: 1024, MaxCalls: 16})
				require.NoError(t, err)
				k := efficacy.NewTracker(task)
				for _, line := range append(slices.Clone(task.Solution[:at]), slip) {
					_, _, err := env.Step(append(tok.EncodeText(line), env.StopID()), nil)
					require.NoError(t, err)
					out, failed := env.Last()
					k.Observe(line, out, failed)
				}
				last := k.Turns[len(k.Turns)-1]
				if k.Next != at || !(last.Failed || toolworld.ParseCall(slip).Name == toolworld.ParseCall(exp).Name) {
					continue // not a slip (e.g. the exploring call)
				}
				h := efficacy.SlipHint(k)
				if h == "" {
					continue
				}
				requireNoQuote(t, h, slip, exp)
				if strings.Contains(h, "Next: ") {
					require.Contains(t, h, "Next: `"+exp+"`.")
				}
				kinds[kind[:min(len(kind), 7)]]++
				if last.Failed {
					kinds["failed"]++
				}
			}
		}
	}
	t.Logf("hints checked by slip kind: %v", kinds)
	require.Greater(t, kinds["own"], 300)
	require.Greater(t, kinds["silent"], 300)
	require.Greater(t, kinds["mistake"], 1000)
	require.Greater(t, kinds["failed"], 1000)
}

// TestDemosHintsNeverQuoteTheSlip replays the warm start's demonstrations (its
// committed mix, DefaultDemo3) through a Tracker and checks every hint turn: it is
// efficacy.SlipHint's text for the episode so far, and it holds no wrong token of the slip
// before it.
func TestDemosHintsNeverQuoteTheSlip(t *testing.T) {
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 1000)
	require.NoError(t, err)
	var cnt DemoCounts
	hints, want := 0, 0
	for i, task := range tasks {
		before := cnt.HintTurns
		r, _, err := playDemo(tok, task, DefaultDemo(), 512, 12, rand.New(rand.NewPCG(3, uint64(i))), &cnt)
		require.NoError(t, err)
		if r == nil {
			continue
		}
		want += cnt.HintTurns - before
		k := efficacy.NewTracker(task)
		last := ""
		text := func(s rollout.Segment) string {
			x, err := tok.Decode(r.Tokens[s.Start:s.End])
			require.NoError(t, err)
			return strings.TrimSpace(efficacy.StripMarkers(x))
		}
		for j, s := range r.Segments {
			switch {
			case s.Kind == rollout.KindToolCall && j+1 < len(r.Segments) && r.Segments[j+1].Kind == rollout.KindToolResult:
				last = text(s)
				k.Observe(last, text(r.Segments[j+1]), r.Segments[j+1].Status == rollout.StatusError)
			case s.Kind == rollout.KindUser && strings.Contains(text(s), toolworld.HintLabel):
				h := text(s)
				h = strings.TrimSpace(h[strings.Index(h, toolworld.HintLabel)+len(toolworld.HintLabel):])
				require.Equal(t, efficacy.SlipHint(k), h, "the demonstration's hint is the world rules' text")
				requireNoQuote(t, h, last, k.Expected())
				hints++
			}
		}
	}
	t.Logf("%d hint turns checked; %+v", hints, cnt)
	require.Equal(t, want, hints, "every hint turn of the kept demonstrations is checked")
	require.Greater(t, hints, 50)
}

// TestGateBetter checks the order in which attempt 3 keeps a checkpoint when none
// passes Gate3Proxy: inside G3's band first, then the hinted next-call rate, then
// greedy success; ties keep the earlier one.
func TestGateBetter(t *testing.T) {
	inLow := ValPoint{Success: 0.30, HintRight: 0.05}
	inHigh := ValPoint{Success: 0.45, HintRight: 0.05}
	inHint := ValPoint{Success: 0.35, HintRight: 0.20}
	over := ValPoint{Success: 0.50, HintRight: 0.90}
	under := ValPoint{Success: 0.15, HintRight: 0.30}
	underMore := ValPoint{Success: 0.25, HintRight: 0.30}
	for _, tc := range []struct {
		a, b ValPoint
		want bool
		why  string
	}{
		{inLow, over, true, "in the band beats a better hint rate above it"},
		{inLow, under, true, "in the band beats a better hint rate below it"},
		{over, inLow, false, "above the band loses to the band"},
		{inHint, inHigh, true, "in the band, the hinted next-call rate first"},
		{inHigh, inHint, false, "in the band, success only breaks a hint-rate tie"},
		{inHigh, inLow, true, "equal hint rates: the higher success"},
		{over, under, true, "both outside: the higher hint rate"},
		{underMore, under, true, "both outside, equal hint rates: the higher success"},
		{inLow, inLow, false, "a tie keeps the earlier checkpoint"},
	} {
		require.Equal(t, tc.want, GateBetter(tc.a, tc.b), tc.why)
	}
	// Sorting a run's evals by the rule puts the kept one first.
	evals := []ValPoint{under, over, inHigh, inLow, inHint, underMore}
	slices.SortStableFunc(evals, func(a, b ValPoint) int {
		switch {
		case GateBetter(a, b):
			return -1
		case GateBetter(b, a):
			return 1
		}
		return 0
	})
	require.Equal(t, []ValPoint{inHint, inHigh, inLow, over, underMore, under}, evals)
}

// TestProbeSplitAddsUp checks ProbeSplit against G2's own probe on the same episodes
// of the committed protocol-3 warm start (whose slips are near misses, so the right
// call and the slip share a prefix): the shared prefix plus the rest is ProbeSlips's
// Σ Δ, for the right call and for the slip repeated, and the failed and silent slips
// add up to all.
func TestProbeSplitAddsUp(t *testing.T) {
	backend, err := xla.NewBackend(xla.ResolveBackend(xla.DefaultBackend, ""))
	require.NoError(t, err)
	p, err := efficacy.OpenPolicy(backend, filepath.Join("..", "..", "..", "bench", "efficacy", "protocol3", "warmstart", "model"))
	require.NoError(t, err)
	tasks, err := toolworld.Tasks(toolworld.SplitValidation, 4)
	require.NoError(t, err)
	w := World()
	d, err := efficacy.ProbeSlips(t.Context(), backend, p, tasks, w, 1, 5)
	require.NoError(t, err)
	s, err := efficacy.ProbeSplit(t.Context(), backend, p, tasks, w, 1, 5)
	require.NoError(t, err)
	t.Logf("G2 %+v\nsplit %+v", d, s)
	require.Equal(t, d.Slips, s.All.Slips)
	require.Positive(t, s.All.SharedLen, "near misses share a prefix with the right call")
	require.InDelta(t, d.HintRight, s.All.Shared+s.All.RightRest, 1e-3)
	require.InDelta(t, d.HintRepeat, s.All.Shared+s.All.RepeatRest, 1e-3)
	require.Equal(t, s.All.Slips, s.Failed.Slips+s.Silent.Slips)
	require.LessOrEqual(t, s.All.AboveHint, s.All.Slips)
	require.InDelta(t, s.All.MarginHint*float64(s.All.Slips), s.Failed.MarginHint*float64(s.Failed.Slips)+s.Silent.MarginHint*float64(s.Silent.Slips), 1e-6)
	// G2 as attempt 5 registered it: the wrong actions from their first token that
	// differs from the right call, the repeat and the exploring call pooled.
	require.InDelta(t, s.All.MarginHint-s.All.MarginEmpty, s.All.MarginGain, 1e-9)
	require.Equal(t, s.All.Slips+s.All.Explores, s.All.Wrong)
	require.InDelta(t, s.All.WrongRest*float64(s.All.Wrong), s.All.RepeatRest*float64(s.All.Slips)+s.All.ExploreRest*float64(s.All.Explores), 1e-6)
	require.Equal(t, d.Compared, s.All.Wrong, "the same wrong actions as G2's probe")
	g := G2Copy(d, s.All)
	require.Equal(t, d.HintRight >= 2 && s.All.WrongRest <= -1 && s.All.MarginGain >= 3, g.Pass)
	require.Equal(t, s.All.MarginGain, g.Measured["margin_gain"])
}
