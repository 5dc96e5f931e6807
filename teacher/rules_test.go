package teacher

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

func TestRulesTeacher(t *testing.T) {
	ok, fail := rollout.StatusOK, rollout.StatusError
	grepCall := call("grep", `<tool_call>{"name":"grep","arguments":{"pattern":"Foo","path":"pkg/foo"}}</tool_call>`)
	notFound := "error: grep: pkg/foo: no such file or directory\nexit status 2\n"
	tests := []struct {
		name    string
		parts   []part
		setup   func(r *rollout.Rollout)
		cfg     func(*RulesConfig)
		sel     func(r *rollout.Rollout) Selection
		rule    string
		want    []string // substrings of the hint
		notWant []string
	}{
		{
			name: "failed call, not found: find it first with a search tool",
			parts: []part{sys(sysTools), user("fix\n"), think("<think>x</think>"), grepCall,
				result("grep", fail, notFound), say("done\n")},
			cfg:     func(c *RulesConfig) { c.Patterns = []string{PatternFailedCall} },
			sel:     func(r *rollout.Rollout) Selection { return target(r, 3, ReasonToolError, 4) },
			rule:    PatternFailedCall,
			want:    []string{"The `grep` call here fails", "does not exist", "`search_code`"},
			notWant: []string{"pkg/foo", "exit status"},
		},
		{
			name: "failed call, permission",
			parts: []part{sys(sysTools), user("fix\n"), think("<think>x</think>"), call("read_file", "read /etc/shadow"),
				result("read_file", fail, "open /etc/shadow: permission denied\n"), say("done\n")},
			cfg:  func(c *RulesConfig) { c.Patterns = []string{PatternFailedCall} },
			sel:  func(r *rollout.Rollout) Selection { return target(r, 3, ReasonToolError, 4) },
			rule: PatternFailedCall,
			want: []string{"`read_file`", "not allowed"},
		},
		{
			name: "failed call, timeout",
			parts: []part{sys(sysTools), user("fix\n"), call("run_tests", "run all"),
				result("run_tests", fail, "context deadline exceeded after 600s\n"), say("done\n")},
			cfg:  func(c *RulesConfig) { c.Patterns = []string{PatternFailedCall} },
			sel:  func(r *rollout.Rollout) Selection { return target(r, 2, ReasonToolError, 3) },
			rule: PatternFailedCall,
			want: []string{"`run_tests`", "runs too long"},
		},
		{
			name: "failed call, malformed arguments",
			parts: []part{sys(sysTools), user("fix\n"), call("grep", "grep {"),
				result("grep", fail, "invalid JSON in arguments\n"), say("done\n")},
			cfg:  func(c *RulesConfig) { c.Patterns = []string{PatternFailedCall} },
			sel:  func(r *rollout.Rollout) Selection { return target(r, 2, ReasonToolError, 3) },
			rule: PatternFailedCall,
			want: []string{"arguments are malformed"},
		},
		{
			name: "failed call, unknown tool",
			parts: []part{sys(sysTools), user("fix\n"), call("ripgrep", "rg Foo"),
				result("ripgrep", fail, "unknown tool ripgrep\n"), say("done\n")},
			cfg:  func(c *RulesConfig) { c.Patterns = []string{PatternFailedCall} },
			sel:  func(r *rollout.Rollout) Selection { return target(r, 2, ReasonToolError, 3) },
			rule: PatternFailedCall,
			want: []string{"`ripgrep`", "does not exist; call one of the tools"},
		},
		{
			name: "repeated failing call",
			parts: []part{sys(sysTools), user("fix\n"), think("<think>a</think>"), grepCall, result("grep", fail, notFound),
				think("<think>again</think>"), grepCall, result("grep", fail, notFound), say("done\n")},
			cfg:  func(c *RulesConfig) { c.Patterns = []string{PatternRepeatedFailure} },
			sel:  func(r *rollout.Rollout) Selection { return target(r, 6, ReasonToolError, 7) },
			rule: PatternRepeatedFailure,
			want: []string{"This exact `grep` call already failed earlier"},
		},
		{
			name: "the first failure is not a repeat",
			parts: []part{sys(sysTools), user("fix\n"), think("<think>a</think>"), grepCall, result("grep", fail, notFound),
				think("<think>again</think>"), grepCall, result("grep", fail, notFound), say("done\n")},
			cfg: func(c *RulesConfig) { c.Patterns = []string{PatternRepeatedFailure} },
			sel: func(r *rollout.Rollout) Selection { return target(r, 3, ReasonToolError, 4) },
		},
		{
			name: "unused tools from the system prompt",
			parts: []part{sys(sysTools), user("fix\n"), call("read_file", "read a.go"),
				result("read_file", fail, "no such file\n"), call("grep", "grep x"), result("grep", ok, "a.go:1\n"), say("done\n")},
			cfg:     func(c *RulesConfig) { c.Patterns = []string{PatternUnusedTool} },
			sel:     func(r *rollout.Rollout) Selection { return target(r, 2, ReasonToolError, 3) },
			rule:    PatternUnusedTool,
			want:    []string{"The `search_code` and `run_tests` tools are available and were never used"},
			notWant: []string{"`grep`", "`read_file`"},
		},
		{
			name: "unused tools from JSON tool definitions, capped",
			parts: []part{sys(`{"type":"function","function":{"name":"web_search"}} {"type":"function","function":{"name":"fetch"}} {"function":{"name":"calc"}}`),
				user("q\n"), say("I think 42.\n")},
			setup: func(r *rollout.Rollout) { r.HasFeedback, r.Feedback = true, -1 },
			cfg:   func(c *RulesConfig) { c.Patterns = []string{PatternUnusedTool}; c.MaxTools = 1 },
			sel:   func(r *rollout.Rollout) Selection { return target(r, 2, ReasonNegativeRating, -1) },
			rule:  PatternUnusedTool,
			want:  []string{"The `web_search` tool is available and was never used"},
		},
		{
			name: "unused tools stay quiet where nothing went wrong",
			parts: []part{sys(sysTools), user("fix\n"), call("read_file", "read a.go"),
				result("read_file", ok, "package a\n"), say("done\n")},
			cfg: func(c *RulesConfig) { c.Patterns = []string{PatternUnusedTool} },
			sel: func(r *rollout.Rollout) Selection { return target(r, 4, ReasonFeedback, 4) },
		},
		{
			name: "ignored non-zero exit code",
			parts: []part{sys(sysTools), user("fix\n"), call("run_tests", "go test ./..."),
				result("run_tests", ok, "--- FAIL: TestX\nFAIL\nexit status 1\n"), say("All tests pass, done.\n")},
			cfg:  func(c *RulesConfig) { c.Patterns = []string{PatternIgnoredExit} },
			sel:  func(r *rollout.Rollout) Selection { return target(r, 4, ReasonNegativeRating, -1) },
			rule: PatternIgnoredExit,
			want: []string{"The previous `run_tests` command exited with status 1"},
		},
		{
			name: "a turn that addresses the exit code is fine",
			parts: []part{sys(sysTools), user("fix\n"), call("run_tests", "go test ./..."),
				result("run_tests", ok, "exit code: 1\n"), say("The tests fail; looking at TestX.\n")},
			cfg: func(c *RulesConfig) { c.Patterns = []string{PatternIgnoredExit} },
			sel: func(r *rollout.Rollout) Selection { return target(r, 4, ReasonNegativeRating, -1) },
		},
		{
			name: "exit code zero is fine",
			parts: []part{sys(sysTools), user("fix\n"), call("run_tests", "go test ./..."),
				result("run_tests", ok, "ok\nexit status 0\n"), say("Done.\n")},
			cfg: func(c *RulesConfig) { c.Patterns = []string{PatternIgnoredExit} },
			sel: func(r *rollout.Rollout) Selection { return target(r, 4, ReasonNegativeRating, -1) },
		},
		{
			name: "patterns combine in config order",
			parts: []part{sys(sysTools), user("fix\n"), think("<think>a</think>"), grepCall, result("grep", fail, notFound),
				think("<think>again</think>"), grepCall, result("grep", fail, notFound), say("done\n")},
			sel:  func(r *rollout.Rollout) Selection { return target(r, 6, ReasonToolError, 7) },
			rule: "failed_call,repeated_failure,unused_tool,ignored_exit",
			want: []string{"The `grep` call here fails", "This exact `grep` call", "`read_file` and `search_code` tools",
				"exited with status 2"},
		},
	}
	tok := tokenizer.NewBytes()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := build(tc.parts...)
			if tc.setup != nil {
				tc.setup(r)
			}
			cfg := DefaultRulesConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			require.NoError(t, cfg.Validate("rules."))
			sel := tc.sel(r)
			hs, err := NewRulesTeacher(cfg, tok).Hints(t.Context(), r, []Selection{sel})
			require.NoError(t, err)
			require.Len(t, hs, 1)
			h := hs[0]
			require.Equal(t, sel, h.Selection)
			require.Equal(t, "rules", h.Source)
			require.NoError(t, h.Err)
			require.Equal(t, tc.rule, h.Rule, "hint %q", h.Text)
			if len(tc.want) == 0 {
				require.Empty(t, h.Text)
			}
			for _, w := range tc.want {
				require.Contains(t, h.Text, w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, h.Text, w)
			}
		})
	}
}

// TestRulesNeverLeak runs selection and the rules teacher over synthetic rollouts: the
// rules speak about most failed calls, and no rules hint trips the leak guard.
func TestRulesNeverLeak(t *testing.T) {
	tok := tokenizer.NewBytes()
	rules := NewRulesTeacher(DefaultRulesConfig(), tok)
	guard := NewLeakGuard(DefaultLeakConfig(), tok)
	opts := rollout.SynthOptions{N: 30, Tokens: 8000, Seed: 11}
	hinted := 0
	for i := range opts.N {
		r := rollout.Synthesize(opts, i)
		sels := Select(r, DefaultSelectConfig())
		hs, err := rules.Hints(t.Context(), r, sels)
		require.NoError(t, err)
		for _, h := range hs {
			if h.Text == "" {
				continue
			}
			hinted++
			require.Nil(t, guard.Check(r, h.Selection, h.Text), "hint %q", h.Text)
			if h.Reason == ReasonToolError {
				require.True(t, strings.HasPrefix(h.Text, "The `"), "hint %q", h.Text)
			}
		}
	}
	require.Greater(t, hinted, 20)
}

func TestRulesConfigValidate(t *testing.T) {
	c := DefaultRulesConfig()
	c.Patterns = []string{"failed_call", "astrology"}
	require.ErrorContains(t, c.Validate("teacher.rules."), `teacher.rules.patterns[1]: unknown pattern "astrology"`)
	c = DefaultRulesConfig()
	c.MaxTools = 0
	require.ErrorContains(t, c.Validate("teacher.rules."), "teacher.rules.max_tools")
}
