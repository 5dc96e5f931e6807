package protocol3

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// TestWorldCaps measures what the scripted agents need: with protocol 3's caps the
// noisy agent (p = 0.25) and protocol 3's demonstration agent without hints (every
// slip followed by an exploring call) succeed ≥ 90% on the held-out split.
func TestWorldCaps(t *testing.T) {
	tok := tokenizer.NewBytes()
	w := World()
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	noisy, demo := 0, 0
	var cnt DemoCounts
	for i, task := range held {
		env, err := toolworld.New(task, tok, toolworld.Options{MaxTokens: w.MaxTokens, MaxCalls: w.MaxCalls})
		require.NoError(t, err)
		rew, err := toolworld.Play(env, toolworld.NewNoisy(0.25, uint64(i)), 16)
		require.NoError(t, err)
		noisy += int(rew)
		r, _, err := playDemo(tok, task, DemoConfig{Slip: 0.25}, w.MaxTokens, w.MaxCalls, rand.New(rand.NewPCG(7, uint64(i))), &cnt)
		require.NoError(t, err)
		if r != nil {
			demo++
		}
	}
	t.Logf("held-out success at %d tokens / %d calls: noisy p=0.25 %d/%d, demo agent (slip 0.25, no hints: explore, then correct) %d/%d (slips %d, silent %d)",
		w.MaxTokens, w.MaxCalls, noisy, len(held), demo, len(held), cnt.Slips, cnt.SilentSlips)
	require.GreaterOrEqual(t, float64(noisy)/float64(len(held)), 0.9)
	require.GreaterOrEqual(t, float64(demo)/float64(len(held)), 0.9)
}

func TestDemos(t *testing.T) {
	tok := tokenizer.NewBytes()
	demos, cnt, err := Demos(tok, 200, DefaultDemo(), 512, 12, 1)
	require.NoError(t, err)
	t.Logf("%+v", cnt)
	require.Equal(t, cnt.Demos, len(demos))
	require.Positive(t, cnt.HintTurns)
	require.Positive(t, cnt.SiblingTurns)
	require.Positive(t, cnt.Explores)
	require.Positive(t, cnt.SilentSlips)
	require.GreaterOrEqual(t, cnt.Demos, 190)
	// Replay one with a hint: the turn after the hint is the expected call, trained.
	for _, d := range demos {
		text, err := tok.Decode(d.Tokens)
		require.NoError(t, err)
		if i := strings.Index(text, "Hint: "); i >= 0 && strings.Contains(text[i:], "Next: `") {
			return
		}
	}
	t.Fatal("no demonstration holds a hint turn that names the next call")
}

// TestHinterWorld3 replays rollouts through the hint stage with protocol 3's rules: a
// hint for each slip, in front of the turn after it, in efficacy.SlipHint's words.
func TestHinterWorld3(t *testing.T) {
	tok := tokenizer.NewBytes()
	h, err := efficacy.NewHinterWith(tok, efficacy.HintSetup{Rules: efficacy.RulesWorld3, Place: efficacy.PlaceRetry, Base: "empty_hint"})
	require.NoError(t, err)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 40)
	require.NoError(t, err)
	var cnt DemoCounts
	hints := 0
	for i, task := range tasks {
		r, slips, err := playDemo(tok, task, DemoConfig{Slip: 0.4}, 512, 12, rand.New(rand.NewPCG(9, uint64(i))), &cnt)
		require.NoError(t, err)
		if r == nil {
			continue
		}
		hs, err := h.Hints(t.Context(), r, task)
		require.NoError(t, err)
		require.Len(t, hs, len(slips), "one hint per slip (each slip is followed by a turn)")
		for _, x := range hs {
			require.True(t, r.Segments[x.Segment].Kind.IsPolicy(), "the hint scores a policy turn")
			require.Equal(t, rollout.KindToolResult, r.Segments[x.Selection.Source].Kind, "after the slip's result")
			require.NotContains(t, x.Text, "answer "+task.Answer)
			require.Equal(t, r.Segments[x.Segment].End, x.End)
		}
		hints += len(hs)
	}
	require.Positive(t, hints)
	require.Equal(t, hints, h.Stats.Hints)
	t.Logf("%d hints, %+v", hints, h.Stats)
}

func TestOwnSlipIsASlip(t *testing.T) {
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 200)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 2))
	n := 0
	for _, task := range tasks {
		for _, call := range task.Solution[:len(task.Solution)-1] {
			s := OwnSlip(call, task, rng.IntN)
			if s == "" || efficacy.SameCall(s, call) {
				continue
			}
			n++
			require.Equal(t, toolworld.ParseCall(call).Name, toolworld.ParseCall(s).Name, "%s → %s", call, s)
		}
	}
	require.Greater(t, n, 400)
	tok := tokenizer.NewBytes()
	cfg := DefaultDemo()
	cfg.Own = 0.8
	demos, cnt, err := Demos(tok, 300, cfg, 512, 12, 1)
	require.NoError(t, err)
	t.Logf("%d demos %+v", len(demos), cnt)
	require.GreaterOrEqual(t, cnt.Demos, 285)
}
