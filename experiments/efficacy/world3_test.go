package efficacy

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

func TestSlipHintNamesOnlyWhatWasSeen(t *testing.T) {
	task := toolworld.Task{Prompt: "Give the number in the only file in tmp/.", Answer: "41",
		Files:    map[string]string{"tmp/fox.txt": "41", "notes/owl.txt": "12"},
		Solution: []string{"ls tmp", "cat tmp/fox.txt", "answer 41"}}
	k := NewTracker(task)
	require.False(t, k.Observe("ls tmp", "fox.txt", false))
	require.True(t, k.Observe("cat tmp/fxo.txt", "cat: tmp/fxo.txt: No such file or directory", true))
	require.Equal(t, "That file does not exist; `ls tmp` lists the files in tmp/, then call `cat` on one of them. Next: `cat tmp/fox.txt`.", SlipHint(k))
	require.True(t, k.Observe("cat notes/owl.txt", "12", false), "a silent slip: the tool the task needs, another file")
	require.Equal(t, "That `cat` read a file the task does not ask about. Next: `cat tmp/fox.txt`.", SlipHint(k))
	require.False(t, k.Observe("ls tmp", "fox.txt", false), "exploring is not a slip")

	// Before ls showed fox.txt the hint cannot name it.
	k = NewTracker(task)
	require.True(t, k.Observe("lss tmp", "lss: unknown tool", true))
	require.Contains(t, SlipHint(k), "Next: `ls tmp`.")
	k.Next = 1 // as if ls had run but its output was not seen
	require.NotContains(t, SlipHint(k), "fox")
	// Never the answer.
	require.True(t, LeaksUnseen("The number is 41.", task, nil))
	require.True(t, LeaksUnseen("Read fox.txt.", task, nil))
	require.False(t, LeaksUnseen("Read fox.txt.", task, []Turn{{Call: "ls tmp", Out: "fox.txt"}}))
}

// TestWorld3Caps measures what the scripted agents need: with protocol 3's caps the
// noisy agent (p = 0.25) and protocol 3's demonstration agent without hints (every
// slip followed by an exploring call) succeed ≥ 90% on the held-out split.
func TestWorld3Caps(t *testing.T) {
	tok := tokenizer.NewBytes()
	w := Protocol3World()
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
		r, _, err := playDemo3(tok, task, Demo3Config{Slip: 0.25}, w.MaxTokens, w.MaxCalls, rand.New(rand.NewPCG(7, uint64(i))), &cnt)
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

func TestDemos3(t *testing.T) {
	tok := tokenizer.NewBytes()
	demos, cnt, err := Demos3(tok, 200, DefaultDemo3(), 512, 12, 1)
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

// TestLiveEvalAndProbe runs the gates' live evals and slip probe on a fresh tiny model
// (its calls fail: every turn is a slip) and checks their bookkeeping.
func TestLiveEvalAndProbe(t *testing.T) {
	backend, err := xla.NewBackend(xla.ResolveBackend(xla.DefaultBackend, ""))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "m")
	_, err = data.InitModel(dir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: "float32"})
	require.NoError(t, err)
	p, err := OpenPolicy(backend, dir)
	require.NoError(t, err)
	tasks, err := toolworld.Tasks(toolworld.SplitValidation, 3)
	require.NoError(t, err)
	w := World{MaxTokens: 200, MaxTurnTokens: 12, MaxCalls: 3}
	for _, c := range []string{LiveNone, LiveHint, LiveSibling} {
		r, envs, err := LiveEval(t.Context(), p, tasks, w, c, 1, 5)
		require.NoError(t, err)
		require.Len(t, envs, 3)
		require.LessOrEqual(t, r.NextRight, r.After)
		require.LessOrEqual(t, r.After, r.Slips)
		if c == LiveNone {
			require.Zero(t, r.Inserted)
		} else {
			require.LessOrEqual(t, r.Inserted+r.NoRoom, r.Slips)
		}
		t.Logf("%+v", r)
	}
	d, err := ProbeSlips(t.Context(), backend, p, tasks, w, 1, 5)
	if err != nil {
		require.ErrorContains(t, err, "no slip with a hint")
		return
	}
	require.Positive(t, d.Slips)
	require.False(t, math.IsNaN(d.HintRight))
	t.Logf("%+v", d)
}

// TestHinterWorld3 replays rollouts through the hint stage with protocol 3's rules: a
// hint for each slip, in front of the turn after it, in SlipHint's words.
func TestHinterWorld3(t *testing.T) {
	tok := tokenizer.NewBytes()
	h, err := NewHinterWith(tok, HintSetup{Rules: RulesWorld3, Place: PlaceRetry, Base: "empty_hint"})
	require.NoError(t, err)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 40)
	require.NoError(t, err)
	var cnt DemoCounts
	hints := 0
	for i, task := range tasks {
		r, slips, err := playDemo3(tok, task, Demo3Config{Slip: 0.4}, 512, 12, rand.New(rand.NewPCG(9, uint64(i))), &cnt)
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
			if s == "" || SameCall(s, call) {
				continue
			}
			n++
			require.Equal(t, toolworld.ParseCall(call).Name, toolworld.ParseCall(s).Name, "%s → %s", call, s)
		}
	}
	require.Greater(t, n, 400)
	tok := tokenizer.NewBytes()
	cfg := DefaultDemo3()
	cfg.Own = 0.8
	demos, cnt, err := Demos3(tok, 300, cfg, 512, 12, 1)
	require.NoError(t, err)
	t.Logf("%d demos %+v", len(demos), cnt)
	require.GreaterOrEqual(t, cnt.Demos, 285)
}
