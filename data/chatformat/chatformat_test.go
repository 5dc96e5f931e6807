package chatformat_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/chatformat"
	"github.com/hindsight-ai/hindsight/data/tokenizer/tokenizertest"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/train"
)

// fixtures names the committed tokenizer of each family.
var fixtures = map[string]string{
	"chatml": "qwen3", "llama3": "llama3", "deepseek_v3": "deepseek_v3", "mistral": "mistral_nemo", "bytes": "bytes",
}

// TestEveryFamilyRoundTrips: each family of the table, on a real tokenizer of that
// family, is detected from it, and renders in each reader of the table as the
// table says: the hint template the daemon picks (teacher.Template.For) wraps a
// hint as the family's user turn, train finds its assistant header, and toolworld
// renders an episode in it where the family has the four turns an episode needs.
func TestEveryFamilyRoundTrips(t *testing.T) {
	require.Len(t, fixtures, len(chatformat.Formats), "a fixture tokenizer per family")
	decode := func(t *testing.T, tok interface {
		Decode([]int32) (string, error)
	}, ids []int32) string {
		t.Helper()
		s, err := tok.Decode(ids)
		require.NoError(t, err)
		return s
	}
	for _, f := range chatformat.Formats {
		t.Run(f.Name, func(t *testing.T) {
			tok := tokenizertest.Load(t, fixtures[f.Name])
			got, ok := chatformat.Detect(tok)
			require.True(t, ok)
			require.Equal(t, f, got)
			named, ok := chatformat.Named(f.Name)
			require.True(t, ok)
			require.Equal(t, f, named)
			_, ok = tok.SpecialID(f.Marker)
			require.True(t, ok, "marker %q", f.Marker)
			require.Len(t, tok.Encode(f.End), 1, "End %q is one token, the stop token", f.End)

			// teacher: the default template takes the family's preset; a hint is its user turn.
			tmpl := teacher.DefaultTemplate().For(tok)
			require.Equal(t, f.Name, tmpl.Preset)
			in, err := teacher.NewInserter(tmpl, tok, 0)
			require.NoError(t, err)
			wrapped, err := in.Wrap("look again")
			require.NoError(t, err)
			require.Equal(t, f.User+"Hint: look again"+f.UserEnd, decode(t, tok, wrapped))
			require.Equal(t, tok.Encode(f.User), wrapped[:len(tok.Encode(f.User))], "the header is special ids")

			// train: the assistant header a rollout without sampler log-probs trains past.
			h := train.HeaderFor(tok)
			if f.Assistant == "" {
				require.Empty(t, h)
			} else {
				require.Equal(t, f.Assistant, decode(t, tok, h))
			}

			// toolworld: an episode's prompt is the system and user turns, then the
			// assistant header; the policy's stop token is End.
			if f.System == "" || f.Tool == "" {
				_, err := toolworld.FormatFor(tok)
				require.Error(t, err)
				return
			}
			ff, err := toolworld.FormatFor(tok)
			require.NoError(t, err)
			require.Equal(t, f, ff)
			env, err := toolworld.New(toolworld.Task{ID: "t", Prompt: "read a.txt", Files: map[string]string{"a.txt": "1"}, Answer: "1"}, tok, toolworld.Options{})
			require.NoError(t, err)
			prompt := decode(t, tok, env.Prompt())
			require.True(t, strings.HasPrefix(prompt, f.System), prompt)
			require.Contains(t, prompt, f.End+f.Sep+f.User)
			require.True(t, strings.HasSuffix(prompt, f.End+f.Sep+f.Assistant), prompt)
			require.Equal(t, tok.Encode(f.End)[0], env.StopID())
		})
	}
}
