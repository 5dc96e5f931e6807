package efficacy

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
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
