package teacher

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/rollout"
)

func TestSelect(t *testing.T) {
	ok, fail := rollout.StatusOK, rollout.StatusError
	// base: 0 system, 1 user, 2 think, 3 call grep (fails), 4 result, 5 think,
	// 6 call read_file, 7 result ok, 8 final answer.
	base := func(mod func(ps []part)) *rollout.Rollout {
		ps := []part{
			sys(sysTools), user("fix the test\n"),
			think("<think>look for it</think>"), call("grep", `{"name":"grep","arguments":{"pattern":"Foo"}}`),
			result("grep", fail, "error: grep: pkg/foo: no such file or directory\nexit status 2\n"),
			think("<think>read it</think>"), call("read_file", `{"name":"read_file","arguments":{"path":"a.go"}}`),
			result("read_file", ok, "package a\n"),
			say("Done, fixed.\n"),
		}
		if mod != nil {
			mod(ps)
		}
		return build(ps...)
	}
	cfg := func(mod func(*SelectConfig)) SelectConfig {
		c := DefaultSelectConfig()
		c.MinGap = 0
		if mod != nil {
			mod(&c)
		}
		return c
	}
	rOf := func(r *rollout.Rollout, i int) (int32, int32) { return r.Segments[i].Start, r.Segments[i].End }

	tests := []struct {
		name string
		r    *rollout.Rollout
		cfg  SelectConfig
		// want: (segment, insert-at segment, reason, source) per selection
		want [][4]any
	}{
		{
			name: "tool error selects the call, inserted at its turn",
			r:    base(nil),
			cfg:  cfg(nil),
			want: [][4]any{{3, 2, ReasonToolError, 4}},
		},
		{
			name: "tool error rule off",
			r:    base(nil),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonFeedback} }),
		},
		{
			name: "feedback on a policy segment targets it",
			r:    base(func(ps []part) { ps[6] = ps[6].withFeedback("read the test first") }),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonFeedback} }),
			want: [][4]any{{6, 5, ReasonFeedback, 6}},
		},
		{
			name: "feedback on a tool result targets the next policy turn",
			r:    base(func(ps []part) { ps[4] = ps[4].withFeedback("the path was guessed") }),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonFeedback} }),
			want: [][4]any{{6, 5, ReasonFeedback, 4}},
		},
		{
			name: "feedback on the user turn targets the first policy turn",
			r:    base(func(ps []part) { ps[1] = ps[1].withFeedback("start with the test") }),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonFeedback} }),
			want: [][4]any{{3, 2, ReasonFeedback, 1}},
		},
		{
			name: "feedback wins over tool error on the same turn",
			r:    base(func(ps []part) { ps[3] = ps[3].withFeedback("use search_code") }),
			cfg:  cfg(nil),
			want: [][4]any{{3, 2, ReasonFeedback, 3}},
		},
		{
			name: "negative rating targets the last policy turn",
			r: func() *rollout.Rollout {
				r := base(nil)
				r.HasFeedback, r.Feedback = true, -1
				return r
			}(),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonNegativeRating} }),
			want: [][4]any{{8, 8, ReasonNegativeRating, -1}},
		},
		{
			name: "positive rating selects nothing",
			r: func() *rollout.Rollout {
				r := base(nil)
				r.HasFeedback, r.Feedback = true, 1
				return r
			}(),
			cfg: cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonNegativeRating} }),
		},
		{
			name: "surprise picks the low-reward turn with the lowest log-probs",
			r: func() *rollout.Rollout {
				r := base(func(ps []part) { ps[5] = ps[5].withLP(-6) })
				r.HasReward, r.Reward = true, 0
				return r
			}(),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonSurprise} }),
			want: [][4]any{{6, 5, ReasonSurprise, -1}},
		},
		{
			name: "surprise needs a reward below the threshold",
			r: func() *rollout.Rollout {
				r := base(func(ps []part) { ps[5] = ps[5].withLP(-6) })
				r.HasReward, r.Reward = true, 1
				return r
			}(),
			cfg: cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonSurprise} }),
		},
		{
			name: "surprise ignores rollouts without a reward",
			r:    base(func(ps []part) { ps[5] = ps[5].withLP(-6) }),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonSurprise} }),
		},
		{
			name: "surprise turns cap",
			r: func() *rollout.Rollout {
				r := base(func(ps []part) { ps[5] = ps[5].withLP(-6); ps[8] = ps[8].withLP(-3) })
				r.HasReward, r.Reward = true, 0
				return r
			}(),
			cfg:  cfg(func(c *SelectConfig) { c.Rules = []Reason{ReasonSurprise}; c.SurpriseTurns = 2 }),
			want: [][4]any{{6, 5, ReasonSurprise, -1}, {8, 8, ReasonSurprise, -1}},
		},
		{
			name: "status error on the call itself",
			r: base(func(ps []part) {
				ps[4].status = ok
				ps[6].status = fail
			}),
			cfg:  cfg(nil),
			want: [][4]any{{6, 5, ReasonToolError, 6}},
		},
		{
			name: "max per rollout",
			r: base(func(ps []part) {
				ps[7].status = fail
				ps[8] = ps[8].withFeedback("explain the cause")
			}),
			cfg:  cfg(func(c *SelectConfig) { c.MaxPerRollout = 2 }),
			want: [][4]any{{3, 2, ReasonToolError, 4}, {8, 8, ReasonFeedback, 8}},
		},
		{
			name: "min gap skips a candidate too close to a chosen one",
			r:    base(func(ps []part) { ps[7].status = fail }),
			cfg:  cfg(func(c *SelectConfig) { c.MinGap = 1000 }),
			want: [][4]any{{3, 2, ReasonToolError, 4}},
		},
		{
			name: "zero max selects nothing",
			r:    base(nil),
			cfg:  cfg(func(c *SelectConfig) { c.MaxPerRollout = 0 }),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Select(tc.r, tc.cfg)
			require.Len(t, got, len(tc.want))
			for i, w := range tc.want {
				seg, at := w[0].(int), w[1].(int)
				start, _ := rOf(tc.r, at)
				_, end := rOf(tc.r, seg)
				require.Equal(t, Selection{Segment: seg, InsertAt: start, End: end, Reason: w[2].(Reason),
					Source: w[3].(int), Score: got[i].Score}, got[i])
			}
		})
	}
}

func TestSelectParallelCalls(t *testing.T) {
	// Two calls in one turn, results in the other order: the read_file result fails.
	r := build(sys(sysTools), user("go\n"),
		think("<think>both</think>"), call("grep", "grep Foo"), call("read_file", "read a.go"),
		result("read_file", rollout.StatusError, "error: no such file\n"), result("grep", rollout.StatusOK, "a.go:1\n"),
		say("done\n"))
	got := Select(r, DefaultSelectConfig())
	require.Len(t, got, 1)
	require.Equal(t, 4, got[0].Segment)
	require.Equal(t, 5, got[0].Source)
	require.Equal(t, r.Segments[2].Start, got[0].InsertAt)
}

// TestSelectSynth checks the invariants of selections over synthetic agent rollouts and
// that the same input gives the same output.
func TestSelectSynth(t *testing.T) {
	opts := rollout.SynthOptions{N: 40, Tokens: 6000, Seed: 7}
	cfg := DefaultSelectConfig()
	reasons := map[Reason]int{}
	for i := range opts.N {
		r := rollout.Synthesize(opts, i)
		got := Select(r, cfg)
		require.Equal(t, got, Select(r, cfg), "deterministic")
		require.LessOrEqual(t, len(got), cfg.MaxPerRollout)
		for k, s := range got {
			reasons[s.Reason]++
			seg := r.Segments[s.Segment]
			require.True(t, seg.Kind.IsPolicy(), "target is a policy segment")
			require.Equal(t, seg.End, s.End)
			ts := turnStart(r, s.Segment)
			require.Equal(t, r.Segments[ts].Start, s.InsertAt)
			require.True(t, ts == 0 || !r.Segments[ts-1].Kind.IsPolicy(), "insert_at is a turn start")
			if k > 0 {
				gap := int32(cfg.MinGap)
				if s.Reason == ReasonFeedback || got[k-1].Reason == ReasonFeedback {
					gap = 0 // a person's comment is never spaced out, only kept from overlapping
				}
				require.GreaterOrEqual(t, s.InsertAt, got[k-1].End+gap, "sorted, apart")
			}
		}
	}
	for _, reason := range allReasons {
		require.Positive(t, reasons[reason], "rule %s fires on synthetic rollouts", reason)
	}
}

func TestSelectConfigValidate(t *testing.T) {
	tests := []struct {
		mod  func(*SelectConfig)
		want string
	}{
		{func(c *SelectConfig) { c.Rules = []Reason{"vibes"} }, `select.rules[0]: unknown rule "vibes"`},
		{func(c *SelectConfig) { c.Rules = []Reason{ReasonFeedback, ReasonFeedback} }, "select.rules[1]: rule \"feedback\" listed twice"},
		{func(c *SelectConfig) { c.MaxPerRollout = -1 }, "select.max_per_rollout"},
		{func(c *SelectConfig) { c.MinGap = -1 }, "select.min_gap"},
		{func(c *SelectConfig) { c.SurpriseTopK = 0 }, "select.surprise_top_k"},
	}
	for _, tc := range tests {
		c := DefaultSelectConfig()
		tc.mod(&c)
		require.ErrorContains(t, c.Validate("select."), tc.want)
	}
	require.NoError(t, DefaultSelectConfig().Validate("select."))
}

// TestSelectComments (issue 38, item 3): a person's comments on neighbouring turns
// are both selected whatever min_gap says (a spacing meant for the rules' hints); a
// comment left out for max_per_rollout, an overlap or a missing feedback rule is
// returned with its reason, never dropped silently.
func TestSelectComments(t *testing.T) {
	r := build(sys(sysTools), user("fix the test\n"),
		think("<think>look</think>"), call("grep", "grep Foo").withFeedback("grep the tests"),
		result("grep", rollout.StatusOK, "a.go:1\n"),
		think("<think>read</think>"), call("read_file", "read a.go").withFeedback("read it whole"),
		result("read_file", rollout.StatusOK, "package a\n").withFeedback("this output says why"),
		say("Done.\n").withFeedback("say what you fixed"))
	cfg := DefaultSelectConfig()
	cfg.MinGap = 1000
	got, dropped := SelectComments(r, cfg)
	require.Equal(t, [][2]int{{3, 3}, {6, 6}, {8, 7}}, [][2]int{{got[0].Segment, got[0].Source}, {got[1].Segment, got[1].Source}, {got[2].Segment, got[2].Source}},
		"every commented turn, min_gap notwithstanding (the tool result's comment targets the next turn)")
	require.Len(t, dropped, 1, "two comments target the last turn: the second is left out and said so")
	require.Equal(t, CommentOverlap, dropped[0].Reason)
	require.Equal(t, 8, dropped[0].Selection.Source)
	require.Equal(t, got, Select(r, cfg))

	cfg.MaxPerRollout = 1
	got, dropped = SelectComments(r, cfg)
	require.Len(t, got, 1)
	require.Len(t, dropped, 3)
	require.Equal(t, CommentNoRoom, dropped[0].Reason)

	cfg = DefaultSelectConfig()
	cfg.Rules = []Reason{ReasonToolError}
	_, dropped = SelectComments(r, cfg)
	require.Len(t, dropped, 4)
	require.Equal(t, CommentNoRule, dropped[0].Reason)
}
