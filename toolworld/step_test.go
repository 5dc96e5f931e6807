package toolworld

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
)

func heldoutTask(t *testing.T, family string) Task {
	t.Helper()
	tasks, err := Tasks(SplitHeldout, 0)
	require.NoError(t, err)
	for _, task := range tasks {
		if task.Family == family {
			return task
		}
	}
	t.Fatalf("no %s task in heldout", family)
	return Task{}
}

// step sends line as a generated turn; stop says whether it ends with the stop token.
func step(t *testing.T, env *Env, line string, stop bool) ([]int32, bool) {
	t.Helper()
	gen := tokenizer.NewBytes().EncodeText(line)
	if stop {
		gen = append(gen, env.StopID())
	}
	next, done, err := env.Step(gen, nil)
	require.NoError(t, err)
	return next, done
}

func TestFailedCallIsRecorded(t *testing.T) {
	tok := tokenizer.NewBytes()
	for _, tc := range []struct {
		line, tool, out string
	}{
		{"cta tmp/fox.txt", "cta", "cta: unknown tool"},
		{"ls -x tmp", "ls", "ls: invalid option -x"},
		{"cat tmp/owl.txt", "cat", "cat: tmp/owl.txt: No such file or directory"},
		{"calc fox+1", "calc", "calc: invalid number 'fox'"},
		{"", "", "error: empty command"},
	} {
		env, err := New(heldoutTask(t, "read"), tok, Options{})
		require.NoError(t, err)
		next, done := step(t, env, tc.line, true)
		require.False(t, done)
		text, _ := tok.Decode(next)
		require.Equal(t, "<|tool|>"+tc.out+"<|end|><|assistant|>", text, tc.line)
		r := env.Rollout("r")
		res := r.Segments[len(r.Segments)-1]
		require.Equal(t, rollout.KindToolResult, res.Kind)
		require.Equal(t, tc.tool, res.Tool)
		require.Equal(t, rollout.StatusError, res.Status)
		require.Equal(t, tc.tool, r.Segments[len(r.Segments)-2].Tool)
		calls, failed := env.Calls()
		require.Equal(t, [2]int{1, 1}, [2]int{calls, failed})
		out, bad := env.Last()
		require.Equal(t, tc.out, out)
		require.True(t, bad)
	}
}

func TestWrongAnswerAndStoreCheck(t *testing.T) {
	task := heldoutTask(t, "store")
	env, err := New(task, tokenizer.NewBytes(), Options{})
	require.NoError(t, err)
	// The right answer without the set call: the store is not as the task wants.
	_, done := step(t, env, "answer "+task.Answer, true)
	require.True(t, done)
	require.Equal(t, float32(0), env.Reward())
	require.False(t, env.Truncated())
	require.Equal(t, "assistant", env.Rollout("r").Segments[2].KindName)
}

func TestEpisodeLimits(t *testing.T) {
	task := heldoutTask(t, "chainset")
	tok := tokenizer.NewBytes()
	for _, tc := range []struct {
		name string
		opts Options
		max  int
	}{
		{"max tokens", Options{MaxTokens: 150}, 150},
		{"max calls", Options{MaxCalls: 2}, 256},
	} {
		env, err := New(task, tok, tc.opts)
		require.NoError(t, err)
		reward, err := Play(env, &Oracle{}, 20)
		require.NoError(t, err)
		require.Equal(t, float32(0), reward, tc.name)
		require.True(t, env.Done() && env.Truncated(), tc.name)
		require.LessOrEqual(t, len(env.Tokens()), tc.max, tc.name)
		require.Empty(t, rollout.Validate(env.Rollout("r"), rollout.ReadOptions{VocabSize: tok.VocabSize()}), tc.name)
		_, _, err = env.Step([]int32{'l', 's', env.StopID()}, nil)
		require.ErrorContains(t, err, "the episode is over", tc.name)
	}
}

func TestTurnWithoutStopToken(t *testing.T) {
	tok := tokenizer.NewBytes()
	env, err := New(heldoutTask(t, "read"), tok, Options{})
	require.NoError(t, err)
	before := len(env.Tokens())
	next, done := step(t, env, "ls tmp", false) // cut short by the sampler's cap
	require.False(t, done)
	require.NotEmpty(t, next)
	r := env.Rollout("r")
	closing := before + len("ls tmp") // Prompt ends with the assistant header
	require.Equal(t, env.StopID(), r.Tokens[closing], "the harness closes the turn")
	require.False(t, r.Trainable(closing), "with a null log-prob")

	// A turn that runs into MaxTokens ends the episode.
	env, err = New(heldoutTask(t, "read"), tok, Options{MaxTokens: 100})
	require.NoError(t, err)
	_, done = step(t, env, strings.Repeat("x", env.Budget()), false)
	require.True(t, done)
	require.True(t, env.Truncated())
	require.Equal(t, 0, env.Budget())

	// ChatML: the turn's end and separator count against MaxTokens too.
	q := qwen3(t)
	env, err = New(heldoutTask(t, "read"), q, Options{MaxTokens: 100})
	require.NoError(t, err)
	gen := q.EncodeText(strings.Repeat("x", 400))[:env.Budget()]
	_, done, err = env.Step(gen, nil)
	require.NoError(t, err)
	require.True(t, done && env.Truncated())
	require.LessOrEqual(t, len(env.Tokens()), 100)
}

func TestStepRejectsBadInput(t *testing.T) {
	env, err := New(heldoutTask(t, "read"), tokenizer.NewBytes(), Options{})
	require.NoError(t, err)
	_, _, err = env.Step([]int32{'l', 's'}, []float32{-1})
	require.ErrorContains(t, err, "1 log-probs for 2 generated tokens")
	_, _, err = env.Step([]int32{'l', 9999}, nil)
	require.ErrorContains(t, err, "id 9999 at position 1")
	require.Len(t, env.Rollout("r").Segments, 2, "a rejected turn leaves nothing behind")
}

// TestBytesChatTemplate renders the same conversation with tokenizer.BytesChatTemplate in
// Jinja (Python's jinja2, as transformers does) and compares it with the Env's text.
func TestBytesChatTemplate(t *testing.T) {
	if exec.Command("python3", "-c", "import jinja2").Run() != nil {
		t.Skip("python3 with jinja2 is not available")
	}
	tok := tokenizer.NewBytes()
	task := heldoutTask(t, "sum")
	env, err := New(task, tok, Options{})
	require.NoError(t, err)
	msgs := []map[string]string{{"role": "system", "content": SystemPrompt}, {"role": "user", "content": task.Prompt}}
	for _, line := range task.Solution {
		msgs = append(msgs, map[string]string{"role": "assistant", "content": line})
		_, done := step(t, env, line, true)
		if !done {
			out, _ := env.Last()
			msgs = append(msgs, map[string]string{"role": "tool", "content": out})
		}
	}
	want, err := tok.Decode(env.Tokens())
	require.NoError(t, err)
	raw, err := json.Marshal(map[string]any{"template": tokenizer.BytesChatTemplate, "messages": msgs})
	require.NoError(t, err)
	script := `import json, sys, jinja2
d = json.load(sys.stdin)
def raise_exception(m): raise Exception(m)
t = jinja2.Environment().from_string(d["template"])
sys.stdout.write(t.render(messages=d["messages"], add_generation_prompt=False, raise_exception=raise_exception))
sys.stdout.write("\n" + t.render(messages=d["messages"][:2], add_generation_prompt=True, raise_exception=raise_exception))`
	cmd := exec.Command("python3", "-c", script)
	cmd.Stdin = strings.NewReader(string(raw))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	full, prompt, _ := strings.Cut(string(out), "\n")
	require.Equal(t, want, full)
	first, err := New(task, tok, Options{})
	require.NoError(t, err)
	firstText, _ := tok.Decode(first.Prompt())
	require.Equal(t, firstText, prompt, "the generation prompt is the Env's Prompt")
}
