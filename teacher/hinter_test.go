package teacher

import (
	"context"
	"errors"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

// TestHinterSynth runs the offline chain (feedback, then rules) over synthetic agent
// rollouts and checks every hint end to end: a person's comment wins, rules fill in,
// the tokens are the template around the text, and the counters add up.
func TestHinterSynth(t *testing.T) {
	tok := tokenizer.NewBytes()
	cfg := DefaultConfig()
	cfg.Template = Template{Preset: "bytes", Label: "Hint: "}
	h, err := New(cfg, Deps{Tokenizer: tok, Logger: zerolog.Nop()})
	require.NoError(t, err)
	in := h.Inserter()
	opts := rollout.SynthOptions{N: 24, Tokens: 6000, Seed: 3}
	var sels, hints int
	sources := map[string]int{}
	for i := range opts.N {
		r := rollout.Synthesize(opts, i)
		res, err := h.Run(t.Context(), r)
		require.NoError(t, err)
		require.False(t, res.Hold)
		require.Empty(t, res.Failed)
		sels += len(res.Selections)
		hints += len(res.Hints)
		for _, hint := range res.Hints {
			sources[hint.Source]++
			want, err := in.Wrap(hint.Text)
			require.NoError(t, err)
			require.Equal(t, want, hint.Tokens)
			if hint.Source == "feedback" {
				fb := r.Segments[hint.Selection.Source].Feedback
				require.Equal(t, fb, hint.Text, "a person's comment is the hint, as written")
			}
			require.Equal(t, in.Empty(), hint.Empty, "the hint carries its own template's empty turn")
			require.Less(t, hint.InsertAt, hint.End)
			require.LessOrEqual(t, int(hint.End), len(r.Tokens))
		}
	}
	snap := h.Stats().Snapshot()
	require.EqualValues(t, opts.N, snap.Rollouts)
	require.EqualValues(t, sels, snap.Selections)
	require.EqualValues(t, hints, snap.Hints["feedback"]+snap.Hints["rules"])
	require.EqualValues(t, sels, int64(hints)+snap.NoHint+snap.LeakDropped+snap.TooLong)
	require.Positive(t, sources["feedback"])
	require.Positive(t, sources["rules"])
}

// fakeTeacher answers from a table: text, or a failure.
type fakeTeacher struct {
	name  string
	texts map[int]string // by target segment
	fails map[int]FailureKind
	asked [][]Selection
}

func (f *fakeTeacher) Name() string { return f.name }

func (f *fakeTeacher) Hints(ctx context.Context, _ *rollout.Rollout, sels []Selection) ([]Hint, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f.asked = append(f.asked, sels)
	out := make([]Hint, len(sels))
	for i, s := range sels {
		out[i] = Hint{Selection: s, Source: f.name, Text: f.texts[s.Segment]}
		if k, ok := f.fails[s.Segment]; ok {
			out[i].Err = &Failure{Kind: k, Err: errors.New("boom")}
		}
	}
	return out, nil
}

func TestCompose(t *testing.T) {
	r := leakRollout()
	sels := []Selection{target(r, 3, ReasonToolError, 4), target(r, 6, ReasonSurprise, -1), target(r, 8, ReasonNegativeRating, -1)}
	a := &fakeTeacher{name: "a", texts: map[int]string{3: "from a"}, fails: map[int]FailureKind{6: FailServer}}
	b := &fakeTeacher{name: "b", texts: map[int]string{6: "from b"}, fails: map[int]FailureKind{8: FailTimeout}}
	c := Compose(a, b)
	require.Equal(t, "chain(a,b)", c.Name())
	hs, err := c.Hints(t.Context(), r, sels)
	require.NoError(t, err)
	require.Len(t, hs, 3)
	require.Equal(t, "from a", hs[0].Text)
	require.Equal(t, "from b", hs[1].Text, "a later teacher covers an earlier failure")
	require.NoError(t, hs[1].Err)
	require.Equal(t, FailTimeout, KindOf(hs[2].Err))
	require.Len(t, b.asked[0], 2, "b is asked only for what a did not answer")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.Hints(ctx, r, sels)
	require.ErrorIs(t, err, context.Canceled)
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Chain = nil }, "teacher.chain: at least one"},
		{func(c *Config) { c.Chain = []string{"oracle"} }, `teacher.chain[0]: unknown teacher "oracle"`},
		{func(c *Config) { c.Chain = []string{"rules", "rules"} }, `teacher.chain[1]: teacher "rules" listed twice`},
		{func(c *Config) { c.OnFailure = "panic" }, `teacher.on_failure: want outcome_only or hold, got "panic"`},
		{func(c *Config) { c.Chain = []string{"openai"} }, "teacher.openai.base_url: required"},
		{func(c *Config) {
			c.Chain = []string{"openai"}
			c.OpenAI.BaseURL, c.OpenAI.Model = "ftp://x", "m"
		}, "teacher.openai.base_url: want an http(s) URL"},
		{func(c *Config) {
			c.Chain = []string{"openai"}
			c.OpenAI.BaseURL, c.OpenAI.Model, c.OpenAI.Timeout = "http://127.0.0.1:1/v1", "m", 0
		}, "teacher.openai.timeout"},
		{func(c *Config) {
			c.Chain = []string{"openai"}
			c.OpenAI.BaseURL, c.OpenAI.Model, c.OpenAI.PromptTemplate = "http://127.0.0.1:1/v1", "m", "{{.Nope"
		}, "teacher.openai.prompt_template"},
		{func(c *Config) {
			c.Chain = []string{"openai"}
			c.OpenAI.BaseURL, c.OpenAI.Model = "http://127.0.0.1:1/v1", "m"
			c.OpenAI.Breaker.Failures = 0
		}, "teacher.openai.breaker.failures"},
		{func(c *Config) { c.Template = Template{} }, "teacher.template.prefix"},
		{func(c *Config) { c.MaxHintTokens = -1 }, "teacher.max_hint_tokens"},
		{func(c *Config) { c.Select.MinGap = -1 }, "teacher.select.min_gap"},
		{func(c *Config) { c.Leak.MinRunChars = 0 }, "teacher.leak.min_run_chars"},
	}
	for _, tc := range tests {
		c := DefaultConfig()
		tc.mod(&c)
		require.ErrorContains(t, c.Validate("teacher."), tc.want)
	}
	require.NoError(t, DefaultConfig().Validate("teacher."))
}
