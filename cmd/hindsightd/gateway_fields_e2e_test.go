package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGatewaySamplingFields: the official openai client against the real daemon
// (gateway/testdata/openai_fields.py): GET /v1/models/{id} says the context served
// and 404s another id; top_logprobs, logit_bias and stop_token_ids change the
// answer as asked; tool_choice "required", a JSON response format, an unknown field
// and an out-of-range penalty are refused by param; a conversation past
// max_context_tokens is context_length_exceeded; and a streamed reply the client
// leaves is dropped by the sampler (its log line), not sampled to its 4,000 tokens.
func TestGatewaySamplingFields(t *testing.T) {
	python := pythonWith(t, "openai")
	dataDir := t.TempDir()
	p, base := startGateway(t, dataDir)
	out := filepath.Join(t.TempDir(), "fields.json")
	cmd := exec.CommandContext(t.Context(), python, "../../gateway/testdata/openai_fields.py", base, gatewayKey, out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\ndaemon log:\n%s", b, p.log())
	var res struct {
		MaxModelLen  int    `json:"max_model_len"`
		MissingModel string `json:"missing_model"`
		TopLogprobs  int    `json:"top_logprobs"`
		Stop         struct {
			Greedy, Stopped []int32
			Finish          string
		} `json:"stop"`
		Refused   map[string]*string `json:"refused"`
		TooLong   *string            `json:"too_long"`
		LeftAfter int                `json:"left_after"`
	}
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &res))
	require.Equal(t, 8192, res.MaxModelLen, "gateway.max_context_tokens, not the config's 131072")
	require.Equal(t, "model_not_found", res.MissingModel)
	require.Equal(t, 6, res.TopLogprobs)
	n := 0
	for res.Stop.Greedy[n] != res.Stop.Greedy[2] {
		n++
	}
	require.Equal(t, res.Stop.Greedy[:n+1], res.Stop.Stopped)
	require.Equal(t, "stop", res.Stop.Finish)
	for _, name := range []string{"tool_choice", "response_format", "reasoning_effort", "presence_penalty"} {
		require.NotNil(t, res.Refused[name], "%s was accepted", name)
		require.Equal(t, name, *res.Refused[name])
	}
	require.NotNil(t, res.TooLong)
	require.Equal(t, "context_length_exceeded", *res.TooLong)
	require.Equal(t, 2, res.LeftAfter)
	p.waitFor(t, 2*time.Minute, "the left row dropped", func() bool {
		return strings.Contains(p.log(), "sampler row dropped: the client went away")
	})
}
