package teacher

import (
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// leakRollout: the grep call (segment 3) fails; the later run_tests output (segment
// 7) holds the answer a leaky hint would paste.
func leakRollout() *rollout.Rollout {
	return build(sys(sysTools), user("fix the failing test\n"),
		think("<think>search</think>"), call("grep", `<tool_call>{"name":"grep","arguments":{"pattern":"ParseConfig","path":"pkg/cfg"}}</tool_call>`),
		result("grep", rollout.StatusError, "error: grep: pkg/cfg: no such file or directory\n"),
		think("<think>run the tests</think>"), call("run_tests", `<tool_call>{"name":"run_tests"}</tool_call>`),
		result("run_tests", rollout.StatusOK, "--- FAIL: TestParseConfig: config_test.go:42: want timeout 30s, got 0s\n"),
		say("Done.\n"))
}

func TestLeakGuard(t *testing.T) {
	r := leakRollout()
	sel := target(r, 3, ReasonToolError, 4)
	tests := []struct {
		name   string
		hint   string
		from   string
		seg    int
		tokens bool
		chars  bool
	}{
		{name: "guidance is fine", hint: "Search for the symbol with `search_code` before guessing a path."},
		{
			name: "pasting future tool output", hint: "The test will say: config_test.go:42: want timeout 30s, got 0s. Fix that.",
			from: "tool_output", seg: 7, tokens: true, chars: true,
		},
		{
			name: "pasting it with other case and spacing", hint: "CONFIG_TEST.GO:42:   want TIMEOUT 30s,\n got 0s",
			from: "tool_output", seg: 7, chars: true,
		},
		{
			name: "copying the segment's own call", hint: `Call {"name":"grep","arguments":{"pattern":"ParseConfig"`,
			from: "segment", seg: 3, tokens: true, chars: true,
		},
		{name: "short quotes are fine", hint: "The `grep` path pkg/cfg does not exist; find it with `search_code`."},
	}
	g := NewLeakGuard(DefaultLeakConfig(), tokenizer.NewBytes())
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := g.Check(r, sel, tc.hint)
			if tc.from == "" {
				require.Nil(t, l)
				return
			}
			require.NotNil(t, l)
			require.Equal(t, tc.from, l.From)
			require.Equal(t, tc.seg, l.Segment)
			require.Equal(t, tc.tokens, l.Tokens >= 12, "tokens %d", l.Tokens)
			require.Equal(t, tc.chars, l.Chars >= 40, "chars %d", l.Chars)
		})
	}
}

func TestLongestRun(t *testing.T) {
	require.Equal(t, 0, longestRun([]byte("abc"), []byte("xxabcxx"), 4))
	require.Equal(t, 3, longestRun([]byte("abc"), []byte("xxabcxx"), 3))
	require.Equal(t, 5, longestRun([]byte("--hello--"), []byte("say hello!"), 3))
	require.Equal(t, 6, longestRun([]int32{9, 1, 2, 3, 4, 5, 6, 9}, []int32{0, 1, 2, 3, 4, 5, 6, 7}, 2))
	require.Equal(t, 0, longestRun([]int32{1, 2}, []int32{1}, 2))
}

// TestLeakDroppedByHinter: a leaky hint (here a person's comment that pastes the future
// test output) is dropped and counted; with action keep it is kept and counted.
func TestLeakDroppedByHinter(t *testing.T) {
	for _, action := range []string{"drop", "keep"} {
		t.Run(action, func(t *testing.T) {
			r := leakRollout()
			r.Segments[3].Feedback = "The test output is: config_test.go:42: want timeout 30s, got 0s"
			cfg := DefaultConfig()
			cfg.Chain = []string{TeacherFeedback}
			cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
			cfg.Leak.Action = action
			h, err := New(cfg, Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
			require.NoError(t, err)
			res, err := h.Run(t.Context(), r)
			require.NoError(t, err)
			require.Len(t, res.Selections, 1)
			require.Len(t, res.Leaks, 1)
			require.Equal(t, "tool_output", res.Leaks[0].Leak.From)
			snap := h.Stats().Snapshot()
			require.EqualValues(t, 1, snap.LeakFlagged)
			if action == "drop" {
				require.Empty(t, res.Hints)
				require.EqualValues(t, 1, snap.LeakDropped)
				require.Empty(t, snap.Hints)
			} else {
				require.Len(t, res.Hints, 1)
				require.EqualValues(t, 0, snap.LeakDropped)
				require.EqualValues(t, 1, snap.Hints["feedback"])
			}
		})
	}
}

func TestLeakConfigValidate(t *testing.T) {
	c := DefaultLeakConfig()
	c.Action = "shrug"
	require.ErrorContains(t, c.Validate("teacher.leak."), `teacher.leak.action: want drop or keep, got "shrug"`)
	c = DefaultLeakConfig()
	c.MinRunTokens = 0
	require.ErrorContains(t, c.Validate("teacher.leak."), "teacher.leak.min_run_tokens")
}

// TestLeakGuardAllowsWhatTheContextShows: a hint may repeat what the task prompt (the
// visible prefix) or the teacher's other context (a sibling) already shows, even when
// the same text comes again in later tool output; a run that goes beyond it still
// counts.
func TestLeakGuardAllowsWhatTheContextShows(t *testing.T) {
	r := build(sys(sysTools), user("fix the failing test; it expects: want timeout 30s\n"),
		think("<think>search</think>"), call("grep", `<tool_call>{"name":"grep","arguments":{"pattern":"ParseConfig","path":"pkg/cfg"}}</tool_call>`),
		result("grep", rollout.StatusError, "error: grep: pkg/cfg: no such file or directory\n"),
		think("<think>run the tests</think>"), call("run_tests", `<tool_call>{"name":"run_tests"}</tool_call>`),
		result("run_tests", rollout.StatusOK, "--- FAIL: TestParseConfig: config_test.go:42: want timeout 30s, got 0s\n"),
		say("Done.\n"))
	sel := target(r, 3, ReasonToolError, 4)
	g := NewLeakGuard(DefaultLeakConfig(), tokenizer.NewBytes())
	require.Nil(t, g.Check(r, sel, "The prompt says it: want timeout 30s. Make the code set it."),
		"the prompt states it")
	l := g.Check(r, sel, "Look: config_test.go:42: want timeout 30s, got 0s")
	require.NotNil(t, l, "the file and line come from the future")
	require.Equal(t, "tool_output", l.From)
	sibling := "run_tests\n--- FAIL: TestParseConfig: config_test.go:42: want timeout 30s, got 0s\nthen edit config.go"
	require.Nil(t, g.Check(r, sel, "Look: config_test.go:42: want timeout 30s, got 0s", sibling),
		"the sibling in the teacher's context shows it")
}

func TestLongestRunShown(t *testing.T) {
	hint, ref := []byte("--hello world--"), []byte("say hello world!")
	require.Equal(t, 11, longestRun(hint, ref, 4))
	require.Equal(t, 0, longestRun(hint, ref, 4, []byte("hello world")), "all shown")
	// Shown only "hello": its windows "hell" and "ello" are; "llo " is not, and the run
	// from there ("llo world") counts.
	require.Equal(t, 9, longestRun(hint, ref, 4, []byte("hello")))
}
