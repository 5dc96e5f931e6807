package teacher

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

func TestPickSiblings(t *testing.T) {
	m := func(task string, reward float64) Member {
		return Member{TaskID: task, Reward: reward, HasReward: true, Accepted: true}
	}
	step := []Member{
		0:  m("a", 0),
		1:  m("a", 1),   // a's success
		2:  m("b", 0),   // b: no success in the step
		3:  m("b", 0.5), // b's best, below success
		4:  m("c", 0),
		5:  {TaskID: "c", Reward: 1, HasReward: true}, // c's success, not accepted
		6:  m("d", 0),
		7:  m("d", 1), // two successes of d: the earliest of the highest
		8:  m("d", 1),
		9:  {TaskID: "a", Reward: 0},     // no reward
		10: {Reward: 0, HasReward: true}, // no task
		11: m("e", 0.2),                  // e: a higher-reward success wins over an earlier one
		12: m("e", 1),                    // a success, still below its group's best: it gets the better one
		13: m("e", 2),
		14: m("x", 3), // another task's success, with the step's highest reward
	}
	got := PickSiblings(step, 1)
	want := []SiblingPick{
		0: {Sibling: 1}, 1: {Sibling: -1, Miss: MissSuccess},
		2: {Sibling: -1, Miss: MissNoSuccess}, 3: {Sibling: -1, Miss: MissNoSuccess},
		4: {Sibling: -1, Miss: MissNoSuccess}, 5: {Sibling: -1, Miss: MissSuccess},
		6: {Sibling: 7}, 7: {Sibling: -1, Miss: MissSuccess}, 8: {Sibling: -1, Miss: MissSuccess},
		9: {Sibling: -1, Miss: MissNoReward}, 10: {Sibling: -1, Miss: MissNoTask},
		11: {Sibling: 13}, 12: {Sibling: 13}, 13: {Sibling: -1, Miss: MissSuccess},
		14: {Sibling: -1, Miss: MissSuccess},
	}
	require.Equal(t, want, got)
}

// TestPickSiblingsProperties: over random steps, a sibling is always another accepted
// rollout of the same task, a success, and better than the rollout; a rollout below
// its group's best goes without one only when the group has no other success.
func TestPickSiblingsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 500 {
		step := make([]Member, 1+rng.IntN(12))
		for i := range step {
			step[i] = Member{TaskID: fmt.Sprint("t", rng.IntN(4)), Reward: float64(rng.IntN(3)) / 2,
				HasReward: rng.IntN(8) > 0, Accepted: rng.IntN(6) > 0}
		}
		for i, p := range PickSiblings(step, 1) {
			me := step[i]
			if p.Sibling >= 0 {
				s := step[p.Sibling]
				require.NotEqual(t, i, p.Sibling, "trial %d", trial)
				require.Equal(t, me.TaskID, s.TaskID, "trial %d: same task", trial)
				require.True(t, s.Accepted, "trial %d: accepted", trial)
				require.GreaterOrEqual(t, s.Reward, 1.0, "trial %d: a success", trial)
				require.Greater(t, s.Reward, me.Reward, "trial %d", trial)
				continue
			}
			if p.Miss == MissNoSuccess {
				for j, s := range step {
					ok := j != i && s.Accepted && s.HasReward && s.TaskID == me.TaskID && s.Reward >= 1 && s.Reward > me.Reward
					require.False(t, ok, "trial %d: %d was a success for %d", trial, j, i)
				}
			}
		}
	}
}

// siblingStep is one step of two tasks on byte tokens: "fail" and "win" try the same
// task; "lone" fails another task whose only success ("unseen") is not accepted.
func siblingStep() []StepRollout {
	mk := func(id, task string, reward float32, parts ...part) *rollout.Rollout {
		r := build(parts...)
		r.ID, r.TaskID, r.Reward, r.HasReward = id, task, reward, true
		return r
	}
	prompt := []part{sys(sysTools), user("<|user|>find the config value\n<|end|>")}
	fail := mk("fail", "cfg", 0, append(prompt,
		call("grep", `<|assistant|><tool_call>{"name":"grep","arguments":{"path":"pkg/cfg"}}</tool_call><|end|>`),
		result("grep", rollout.StatusError, "<|tool|>error: grep: pkg/cfg: no such file or directory\n<|end|>"),
		say("<|assistant|>I give up.<|end|>"))...)
	win := mk("win", "cfg", 1, append(prompt,
		call("search_code", `<|assistant|><tool_call>{"name":"search_code","arguments":{"q":"Timeout"}}</tool_call><|end|>`),
		result("search_code", rollout.StatusOK, "<|tool|>internal/config/config.go:12: Timeout = 30\n<|end|>"),
		say("<|assistant|>The timeout is 30.<|end|>"))...)
	lone := mk("lone", "other", 0, append(prompt, say("<|assistant|>No idea.<|end|>"))...)
	unseen := mk("unseen", "other", 1, append(prompt, say("<|assistant|>42<|end|>"))...)
	return []StepRollout{{Rollout: fail, Accepted: true}, {Rollout: win, Accepted: true},
		{Rollout: lone, Accepted: true}, {Rollout: unseen, Accepted: false}}
}

func TestRenderSolution(t *testing.T) {
	sol, err := RenderSolution(tokenizer.NewBytes(), siblingStep()[1].Rollout)
	require.NoError(t, err)
	require.Equal(t, `<tool_call>{"name":"search_code","arguments":{"q":"Timeout"}}</tool_call>`+"\n"+
		"internal/config/config.go:12: Timeout = 30\nThe timeout is 30.", sol,
		"policy turns and their tool results, markers removed, no system or user turn")
}

func newContextHinter(t *testing.T, sources ...string) *Hinter {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
	cfg.Context.Sources = sources
	h, err := New(cfg, Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	return h
}

func decode(t *testing.T, ids []int32) string {
	t.Helper()
	s, err := tokenizer.NewBytes().Decode(ids)
	require.NoError(t, err)
	return s
}

// TestSiblingsOfAStep: the failed rollout's hints get the success of its own task in
// front; a group without an accepted success gets none (counted); the success itself
// is left alone; nothing crosses steps.
func TestSiblingsOfAStep(t *testing.T) {
	h := newContextHinter(t, ContextSibling, ContextFeedback)
	step := siblingStep()
	for i := range step {
		res, err := h.Run(t.Context(), step[i].Rollout)
		require.NoError(t, err)
		step[i].Hints = res.Hints
	}
	require.NotEmpty(t, step[0].Hints, "the failed grep is selected, with its feedback at least")
	before := append([]Hint(nil), step[0].Hints...)
	out := h.Siblings(step)
	require.Len(t, out, len(step))

	require.Len(t, out[0], len(before))
	feedback := 0
	for k, hint := range out[0] {
		require.Equal(t, "win", hint.Sibling)
		require.Equal(t, before[k].Selection, hint.Selection, "the same place, a richer context")
		text := decode(t, hint.Tokens)
		require.True(t, strings.HasPrefix(text, "<|user|>A correct attempt:\n<tool_call>{\"name\":\"search_code\""), text)
		iSib := strings.Index(text, "Timeout = 30")
		require.Positive(t, iSib)
		require.Contains(t, text, "Now solve it yourself.")
		if hint.Context.Feedback != "" {
			feedback++
			require.Greater(t, strings.Index(text, "no such file or directory"), iSib, "feedback after the sibling: %q", text)
		}
		if hint.Context.Hint != "" {
			require.Greater(t, strings.Index(text, "Hint: "), iSib, "the hint last: %q", text)
		}
		require.Equal(t, h.Inserter().Empty(), hint.Empty)
	}
	require.Equal(t, 1, feedback, "the failed grep's turn carries its feedback")
	require.Empty(t, before[0].Sibling, "the inputs are not modified")
	require.Equal(t, step[1].Hints, out[1], "the success is left alone")
	require.Equal(t, step[2].Hints, out[2], "no accepted success of its task: no sibling")
	for _, hs := range out {
		for _, hint := range hs {
			require.NotEqual(t, "unseen", hint.Sibling, "never a rollout not accepted")
		}
	}
	snap := h.Stats().Snapshot()
	require.EqualValues(t, 1, snap.Contexts[ContextSibling])
	require.EqualValues(t, 1, snap.Contexts["sibling_no_success"])

	// Another step: the same task without its success gets no sibling from the first.
	other := []StepRollout{{Rollout: step[0].Rollout, Accepted: true, Hints: step[0].Hints}}
	require.Equal(t, step[0].Hints, h.Siblings(other)[0])
}

// TestSiblingWithoutHintsScoresTheResponse: a failed rollout with no selection gets one
// over its whole response, the sibling alone in front.
func TestSiblingWithoutHintsScoresTheResponse(t *testing.T) {
	h := newContextHinter(t, ContextSibling)
	step := siblingStep()
	out := h.Siblings(step) // no Run: no hints at all
	require.Len(t, out[0], 1)
	hint := out[0][0]
	r := step[0].Rollout
	require.Equal(t, ReasonSibling, hint.Reason)
	require.Equal(t, r.Segments[2].Start, hint.InsertAt, "from the first policy turn")
	require.Equal(t, r.Segments[4].End, hint.End, "to the end of the last policy segment")
	require.Equal(t, "sibling", hint.Context.Kind())
	require.NotContains(t, decode(t, hint.Tokens), "Hint: ")
	require.Empty(t, out[2])
}

func TestSiblingTooLong(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
	cfg.Context.Sources = []string{ContextSibling}
	cfg.Context.Sibling.MaxTokens = 10
	h, err := New(cfg, Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	out := h.Siblings(siblingStep())
	require.Empty(t, out[0])
	require.EqualValues(t, 1, h.Stats().Snapshot().Contexts["sibling_too_long"])
}

// TestFeedbackContext: the failed call's own tool result goes into the teacher's
// context in front of the policy turn that made the call, before a written hint;
// without a written hint the selection still gets the feedback.
func TestFeedbackContext(t *testing.T) {
	r := leakRollout()
	sel := target(r, 3, ReasonToolError, 4)
	fb, err := EnvFeedback(tokenizer.NewBytes(), r, sel)
	require.NoError(t, err)
	require.Equal(t, "error: grep: pkg/cfg: no such file or directory", fb)
	ok, err := EnvFeedback(tokenizer.NewBytes(), r, target(r, 6, ReasonSurprise, -1))
	require.NoError(t, err)
	require.Empty(t, ok, "the run_tests turn made no failed call")

	for _, withHint := range []bool{true, false} {
		t.Run(fmt.Sprint("hint ", withHint), func(t *testing.T) {
			h := newContextHinter(t, ContextFeedback)
			if !withHint {
				h.teacher = Compose(FeedbackTeacher{}) // no comment in the rollout: no written hint
			}
			res, err := h.Run(t.Context(), leakRollout())
			require.NoError(t, err)
			require.Len(t, res.Hints, 1)
			hint := res.Hints[0]
			require.Equal(t, r.Segments[2].Start, hint.InsertAt, "before the turn that made the call")
			require.Equal(t, fb, hint.Context.Feedback)
			text := decode(t, hint.Tokens)
			require.True(t, strings.HasPrefix(text, "<|user|>The environment answered this turn's call with:\nerror: grep"), text)
			if withHint {
				require.Equal(t, "feedback+hint", hint.Context.Kind())
				require.Equal(t, "rules", hint.Source)
				require.Greater(t, strings.Index(text, "Hint: "), strings.Index(text, "no such file"))
			} else {
				require.Equal(t, "feedback", hint.Context.Kind())
				require.Equal(t, "context", hint.Source)
				require.EqualValues(t, 1, h.Stats().Snapshot().Contexts["context_only"])
			}
		})
	}
}

func TestContextConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		mod  func(*ContextConfig)
		want string
	}{
		{func(c *ContextConfig) { c.Sources = []string{"oracle"} }, "teacher.context.sources[0]: unknown"},
		{func(c *ContextConfig) { c.Sources = []string{"sibling", "sibling"} }, "teacher.context.sources[1]: context \"sibling\" listed twice"},
		{func(c *ContextConfig) { c.Sibling.Template = "A correct attempt" }, "teacher.context.sibling.template"},
		{func(c *ContextConfig) { c.Sibling.MaxTokens = -1 }, "teacher.context.sibling.max_tokens"},
		{func(c *ContextConfig) { c.Feedback.Template = "oops" }, "teacher.context.feedback.template"},
	} {
		c := DefaultContextConfig()
		tt.mod(&c)
		require.ErrorContains(t, c.Validate("teacher.context."), tt.want)
	}
	require.NoError(t, DefaultContextConfig().Validate(""))
}

// TestRenderSolutionChatTemplates: with real chat formats the rendered sibling keeps
// the model's own text (Qwen's <tool_call> added token included, as text) and drops
// the special markers and role headers.
func TestRenderSolutionChatTemplates(t *testing.T) {
	for _, tc := range []struct{ tok, header, end, toolHeader string }{
		{"qwen3", "<|im_start|>assistant\n", "<|im_end|>\n", "<|im_start|>user\n"},
		{"llama3", "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", "<|start_header_id|>ipython<|end_header_id|>\n\n"},
	} {
		t.Run(tc.tok, func(t *testing.T) {
			tok, _ := loadTokenizer(t, tc.tok)
			r := &rollout.Rollout{ID: "sib"}
			add := func(kind rollout.SegmentKind, text string) {
				start := int32(len(r.Tokens))
				r.Tokens = append(r.Tokens, tok.Encode(text)...)
				r.Segments = append(r.Segments, rollout.Segment{Start: start, End: int32(len(r.Tokens)), Kind: kind})
			}
			add(rollout.KindUser, "<|im_start|>user\nfind the timeout<|im_end|>\n")
			add(rollout.KindToolCall, tc.header+`<tool_call>{"name":"search_code"}</tool_call>`+tc.end)
			add(rollout.KindToolResult, tc.toolHeader+"config.go:12: Timeout = 30"+tc.end)
			add(rollout.KindAssistant, tc.header+"It is 30."+tc.end)
			sol, err := RenderSolution(tok, r)
			require.NoError(t, err)
			require.Equal(t, "<tool_call>{\"name\":\"search_code\"}</tool_call>\nconfig.go:12: Timeout = 30\nIt is 30.", sol)
		})
	}
}

// TestSiblingKeepsAHintMadeWithoutRun: a hint built by hand (Context unset, as the
// efficacy harness builds them) keeps its text when the sibling is added.
func TestSiblingKeepsAHintMadeWithoutRun(t *testing.T) {
	h := newContextHinter(t, ContextSibling)
	step := siblingStep()
	sel, ok := responseSelection(step[0].Rollout)
	require.True(t, ok)
	step[0].Hints = []Hint{{Selection: sel, Text: "Search before you read.", Source: "rules"}}
	out := h.Siblings(step)
	require.Len(t, out[0], 1)
	require.Equal(t, "sibling+hint", out[0][0].Context.Kind())
	require.Contains(t, decode(t, out[0][0].Tokens), "Hint: Search before you read.")
}
