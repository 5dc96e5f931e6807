package protocol3

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestRealSlips checks the scripted slips: the solution's calls, then one slip with a
// hint, the actions the probe scores.
func TestRealSlips(t *testing.T) {
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	slips, err := RealSlips(held, 40, 27)
	require.NoError(t, err)
	require.Len(t, slips, 40)
	byID := map[string]toolworld.Task{}
	for _, task := range held {
		byID[task.ID] = task
	}
	kinds := map[string]int{}
	for _, s := range slips {
		task := byID[s.TaskID]
		n := len(s.Turns) - 1
		for i, tu := range s.Turns[:n] {
			require.Equal(t, task.Solution[i], tu.Call, "%s: the calls before the slip are the solution's", s.TaskID)
		}
		require.Equal(t, task.Solution[n], s.Right)
		require.Equal(t, s.Turns[n].Call, s.Repeat)
		require.False(t, efficacy.SameCall(s.Repeat, s.Right))
		require.NotEmpty(t, s.Hint)
		require.Equal(t, strings.Contains(s.Hint, "Next: `"+s.Right+"`"), s.NamesNext)
		require.Equal(t, s.Kind == "failed", s.Turns[n].Failed)
		if s.Explore != "" {
			require.Equal(t, efficacy.Explore(s.Right), s.Explore)
		}
		// The tracker agrees that the last turn is a slip, and efficacy.SlipHint gives the text.
		k := efficacy.NewTracker(task)
		for i, tu := range s.Turns {
			require.Equal(t, i == n, k.Observe(tu.Call, tu.Out, tu.Failed))
		}
		require.Equal(t, efficacy.SlipHint(k), s.Hint)
		kinds[s.Kind]++
	}
	t.Logf("slip kinds %v", kinds)
	again, err := RealSlips(held, 40, 27)
	require.NoError(t, err)
	require.Equal(t, slips, again, "the same seed gives the same slips")
}

// TestRealChatRendering renders a slip's conversation with the byte model's chat
// template (tokenizer.BytesChatTemplate, which InitModel writes into
// tokenizer_config.json; loaded as the gateway loads it) and checks the
// pieces: their text, and that pieces plus an action equal the whole render encoded.
func TestRealChatRendering(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "m")
	_, err := data.InitModel(dir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: "float32"})
	require.NoError(t, err)
	tok := tokenizer.NewBytes()
	chat, err := NewRealChat(dir, tok)
	require.NoError(t, err)
	require.Equal(t, "tokenizer_config.json", chat.Template.Source(), "InitModel writes tokenizer.BytesChatTemplate there")
	end, _ := tok.SpecialID("<|end|>")
	require.Equal(t, end, chat.Stop)

	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	slips, err := RealSlips(held, 3, 27)
	require.NoError(t, err)
	s := slips[0]
	want := "<|system|>" + RealSystemPrompt + "<|end|>"
	for _, e := range RealExample {
		want += "<|" + e.Role + "|>" + e.Content + "<|end|>"
	}
	want += "<|user|>" + byID(t, held, s.TaskID).Prompt + "<|end|>"
	for _, tu := range s.Turns {
		want += "<|assistant|>" + tu.Call + "<|end|><|tool|>" + tu.Out + "<|end|>"
	}
	contexts := map[string]string{
		RealNone:    "",
		RealEmpty:   "<|user|>Hint: <|end|>",
		RealHint:    "<|user|>Hint: " + s.Hint + "<|end|>",
		RealSibling: "<|user|>A correct attempt:\n" + strings.Join(byID(t, held, s.TaskID).Solution, "\n") + "\nNow solve it yourself.<|end|>",
	}
	for kind, ctxText := range contexts {
		ids, err := chat.IDs(s, kind)
		require.NoError(t, err)
		got, err := tok.Decode(ids.Prompt())
		require.NoError(t, err)
		require.Equal(t, want+ctxText+"<|assistant|>", got, kind)
		require.Equal(t, kind == RealNone, ids.Context == nil)
		text, whole, err := chat.Whole(s, kind, s.Right)
		require.NoError(t, err)
		require.Equal(t, want+ctxText+"<|assistant|>"+s.Right+"<|end|>", text)
		require.Equal(t, whole, slices.Concat(ids.Prompt(), chat.Action(s.Right)), kind)
	}
	_, err = chat.IDs(s, "nonsense")
	require.ErrorContains(t, err, "unknown context")
}

func byID(t *testing.T, tasks []toolworld.Task, id string) toolworld.Task {
	t.Helper()
	for _, task := range tasks {
		if task.ID == id {
			return task
		}
	}
	t.Fatalf("no task %s", id)
	return toolworld.Task{}
}

func TestLooseCall(t *testing.T) {
	for _, c := range []struct {
		reply, call string
		want        bool
	}{
		{"cat notes/owl.txt", "cat notes/owl.txt", true},
		{"Run `cat notes/owl.txt`.", "cat notes/owl.txt", true},
		{"cat -c notes/owl.txt", "cat notes/owl.txt", true},
		{"ls tmp\ncat notes/owl.txt", "cat notes/owl.txt", true},
		{"cat notes/ant.txt", "cat notes/owl.txt", false},
		{"cat: notes/owl.txt: No such file or directory", "cat notes/owl.txt", false},
		{"set emu 150", "set emu 150", true},
		{"set emu 15", "set emu 150", false},
		{"notes/owl.txt cat", "cat notes/owl.txt", false},
		{"", "ls", false},
		{"ls", "ls", true},
	} {
		require.Equal(t, c.want, LooseCall(c.reply, c.call), "%q vs %q", c.reply, c.call)
	}
}

// TestRealProbeBookkeeping runs the probe on a fresh tiny byte model: each Σ log-prob
// equals the one a plain Scorer.Score of the whole render gives (no prefix cache, no
// hint splice), and the summary's deltas and counts are recomputed from the items.
func TestRealProbeBookkeeping(t *testing.T) {
	backend, err := xla.NewBackend(xla.ResolveBackend(xla.DefaultBackend, ""))
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "m")
	_, err = data.InitModel(dir, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: "float32"})
	require.NoError(t, err)
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	slips, err := RealSlips(held, 1, 27) // one slip: ~1,000 byte tokens a conversation
	require.NoError(t, err)
	saved := 0
	res, err := RealProbe(t.Context(), backend, dir, slips, 2, 5, func(r RealProbeResult) error { saved = r.Slips; return nil }, nil)
	require.NoError(t, err)
	require.Len(t, res.Items, 1)
	require.Equal(t, 1, saved, "the end of the run is saved")
	require.Equal(t, res.Pieces, res.PiecesMatch)

	p, err := efficacy.OpenPolicy(backend, dir)
	require.NoError(t, err)
	chat, err := NewRealChat(dir, p.Tok)
	require.NoError(t, err)
	sc, err := xla.NewScorer(backend, p.Model, xla.ScorerOptions{})
	require.NoError(t, err)
	for _, it := range res.Items {
		for _, kind := range realScored {
			ids, err := chat.IDs(it.RealSlip, kind)
			require.NoError(t, err)
			for _, a := range realActions(it.RealSlip) {
				act := chat.Action(a.call)
				toks := slices.Concat(ids.Prompt(), act)
				lp, cache, err := sc.Score(t.Context(), toks)
				require.NoError(t, err)
				cache.Close()
				want := 0.0
				for _, v := range lp[len(toks)-len(act):] {
					want += float64(v)
				}
				require.InDelta(t, want, it.LogProb[kind][a.name], 1e-3, "%s %s %s", it.TaskID, kind, a.name)
				require.Less(t, it.LogProb[kind][a.name], 0.0)
			}
		}
		for _, kind := range realGreedy {
			_, ok := it.Reply[kind]
			require.True(t, ok, "a reply after %s", kind)
		}
	}
	// The summary, recomputed.
	for _, d := range res.Delta {
		var right, wrong float64
		nw := 0
		for _, it := range res.Items {
			right += it.LogProb[d.Context]["right"] - it.LogProb[RealEmpty]["right"]
			for _, a := range realActions(it.RealSlip)[1:] {
				wrong += it.LogProb[d.Context][a.name] - it.LogProb[RealEmpty][a.name]
				nw++
			}
		}
		require.InDelta(t, right, d.Right, 1e-9, d.Context)
		first := 0
		for _, it := range res.Items {
			lp := it.LogProb[d.Context]
			if lp["right"] > lp["repeat"] && (it.Explore == "" || lp["right"] > lp["explore"]) {
				first++
			}
		}
		require.Equal(t, first, d.RightFirst, d.Context)
		require.InDelta(t, wrong/float64(nw), d.Wrong, 1e-9, d.Context)
		require.False(t, math.IsNaN(d.Right))
	}
	require.Len(t, res.Next, len(realGreedy))
	for _, x := range res.Next {
		require.Equal(t, 1, x.Slips)
		require.LessOrEqual(t, x.Exact, x.Loose, "an exact call is a loose one")
	}
	require.Contains(t, res.Table(), "| hint |")

	// Read back from JSON, the summary recomputes to the same numbers.
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var back RealProbeResult
	require.NoError(t, json.Unmarshal(b, &back))
	back.Delta, back.Next = nil, nil
	back.Resummarize()
	require.Equal(t, res.Delta, back.Delta)
	require.Equal(t, res.Next, back.Next)
}

// TestRealChatChatML renders a slip's conversation in ChatML with SmolLM2-135M-
// Instruct's own chat template (data/chatformat/testdata/smollm2_chat_template.jinja, the model's
// chat_template.jinja) and a ChatML tokenizer (the Qwen3 fixture: <|im_start|> and
// <|im_end|> are special tokens), without the model: the text the model is shown,
// its stop token, and pieces that equal the whole render's encoding.
func TestRealChatChatML(t *testing.T) {
	tok := tokenizertest.Load(t, "qwen3")
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("..", "..", "..", "data", "chatformat", "testdata", "smollm2_chat_template.jinja"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "chat_template.jinja"), src, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}`), 0o644))
	chat, err := NewRealChat(dir, tok)
	require.NoError(t, err)
	require.Equal(t, "chat_template.jinja", chat.Template.Source())
	end, _ := tok.SpecialID("<|im_end|>")
	require.Equal(t, end, chat.Stop)

	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	require.NoError(t, err)
	slips, err := RealSlips(held, 5, 27)
	require.NoError(t, err)
	turn := func(role, content string) string { return "<|im_start|>" + role + "\n" + content + "<|im_end|>\n" }
	for _, s := range slips {
		task := byID(t, held, s.TaskID)
		want := turn("system", RealSystemPrompt)
		for _, e := range RealExample {
			want += turn(e.Role, e.Content)
		}
		want += turn("user", task.Prompt)
		for _, tu := range s.Turns {
			want += turn("assistant", tu.Call) + turn("tool", tu.Out)
		}
		for kind, ctxText := range map[string]string{RealNone: "", RealHint: turn("user", "Hint: "+s.Hint),
			RealEmpty: turn("user", "Hint: "), RealSibling: turn("user", efficacy.SiblingText(task.Solution))} {
			ids, err := chat.IDs(s, kind)
			require.NoError(t, err)
			got, err := tok.Decode(ids.Prompt())
			require.NoError(t, err)
			require.Equal(t, want+ctxText+"<|im_start|>assistant\n", got, "%s %s", s.TaskID, kind)
			for _, a := range realActions(s) {
				text, whole, err := chat.Whole(s, kind, a.call)
				require.NoError(t, err)
				require.Equal(t, want+ctxText+"<|im_start|>assistant\n"+a.call+"<|im_end|>\n", text)
				pieces := slices.Concat(ids.Prompt(), chat.Action(a.call))
				require.Equal(t, pieces, whole[:len(pieces)], "%s %s %s: pieces equal the whole render", s.TaskID, kind, a.name)
			}
		}
	}
}
