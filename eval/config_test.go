package eval

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	ok := DefaultConfig()
	ok.Suites = []SuiteConfig{
		{Name: "heldout", Kind: KindToolworld, Split: "heldout"},
		{Name: "ll", Kind: KindLikelihood, File: "ref.arrow"},
		{Name: "ext", Kind: KindCommand, Command: []string{"./eval.sh"}},
	}
	require.NoError(t, ok.Validate("eval."))
	for _, tc := range []struct {
		name string
		edit func(c *Config)
		want string
	}{
		{"budget", func(c *Config) { c.Budget = 2 }, "eval.budget"},
		{"every", func(c *Config) { c.EveryCheckpoints = 0 }, "eval.every_checkpoints"},
		{"dup", func(c *Config) { c.Suites[1].Name = "heldout" }, `eval.suites[1].name: "heldout" is used`},
		{"kind", func(c *Config) { c.Suites[0].Kind = "bleu" }, "eval.suites[0].kind"},
		{"file", func(c *Config) { c.Suites[1].File = "" }, "eval.suites[1].file"},
		{"argv", func(c *Config) { c.Suites[2].Command = nil }, "eval.suites[2].command"},
		{"temp", func(c *Config) { c.Suites[0].Temperature = -1 }, "eval.suites[0].temperature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			c.Suites = append([]SuiteConfig(nil), ok.Suites...)
			tc.edit(&c)
			require.ErrorContains(t, c.Validate("eval."), tc.want)
		})
	}
	require.Equal(t, "success", SuiteConfig{Kind: KindToolworld}.PrimaryMetric())
	require.Equal(t, "mean_logprob", SuiteConfig{Kind: KindLikelihood}.PrimaryMetric())
	require.Equal(t, "acc", SuiteConfig{Kind: KindCommand, Primary: "acc"}.PrimaryMetric())
}
