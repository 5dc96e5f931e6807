package train

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestLoopLogsStepProgress: a step logs when it starts, when its scoring ends and
// when its gradients are done, each line with the batch's rollouts and tokens and
// how far each phase is (issue 39 item 3: a long step is visible in the log).
func TestLoopLogsStepProgress(t *testing.T) {
	fx := newLoopFixture(t, nil, func(incoming string) {
		_, err := rollout.WriteSynth(incoming, rollout.SynthOptions{N: 3, PerFile: 3, Tokens: 256, Seed: 4, IDPrefix: "loop"})
		require.NoError(t, err)
	})
	var logs bytes.Buffer
	lp, err := Open(Options{Config: idleConfig(), Credit: credit.DefaultConfig(), Backend: xla.ResolveBackend("", ""),
		ModelDir: fx.modelDir, Tokenizer: fx.md.Tokenizer, CheckpointDir: filepath.Join(fx.root, "checkpoints"), ResumeFrom: -1,
		Ledger: fx.ledger, Pause: never{}, Log: zerolog.New(&logs)})
	require.NoError(t, err)
	fx.run(t, lp, nil)
	_, _, ok := lp.Progress()
	require.False(t, ok, "no step in progress after the run")

	byMsg := map[string]map[string]any{}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m))
		byMsg[m["message"].(string)] = m
	}
	start, scored, grads := byMsg["step started: scoring"], byMsg["step scored: gradient passes"], byMsg["step gradients done: updating the weights"]
	require.NotNil(t, start, logs.String())
	require.NotNil(t, scored, logs.String())
	require.NotNil(t, grads, logs.String())
	for _, m := range []map[string]any{start, scored, grads} {
		require.EqualValues(t, 1, m["step"])
		require.EqualValues(t, 3, m["rollouts"])
		require.Positive(t, m["tokens"])
		require.Contains(t, m, "elapsed_s")
	}
	require.EqualValues(t, 0, start["rollouts_scored"])
	require.EqualValues(t, 3, scored["rollouts_scored"])
	require.Equal(t, start["tokens"], scored["tokens_scored"])
	require.EqualValues(t, 0, scored["rollouts_gradient"])
	require.EqualValues(t, 3, grads["rollouts_gradient"])
	require.Contains(t, scored, "eta_s", "the scoring phase's rate gives an estimate")
}
