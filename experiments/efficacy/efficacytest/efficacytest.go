// Package efficacytest holds what the tests of experiments/efficacy and of its
// protocol3 package share: the backend they run on, a tiny untrained model and a
// rollout played by a fixed script in the real task world. It is test code: only
// tests import it, and it imports neither experiment package.
package efficacytest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gomlx/gomlx/backends"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// BackendSpec is the backend the packages' tests run on: pure Go, or
// $HINDSIGHT_TEST_BACKEND (e.g. xla-cpu).
func BackendSpec() string {
	if s := os.Getenv("HINDSIGHT_TEST_BACKEND"); s != "" {
		return s
	}
	return xla.DefaultBackend
}

// TinyModel opens the test backend and writes an untrained tiny byte-tokenizer model
// (seed 1, float32) into a temporary directory under the name name: the backend, the
// temporary directory and the model's directory.
func TinyModel(t *testing.T, name string) (backends.Backend, string, string) {
	t.Helper()
	backend, err := xla.NewBackend(xla.ResolveBackend(BackendSpec(), ""))
	require.NoError(t, err)
	dir := t.TempDir()
	model := filepath.Join(dir, name)
	_, err = data.InitModel(model, data.InitOptions{Preset: "tiny", Tokenizer: "bytes", Seed: 1, Dtype: "float32"})
	require.NoError(t, err)
	return backend, dir, model
}

// Script plays fixed command lines, then answers 0.
type Script struct {
	Lines []string
	next  int
}

// Act is toolworld.Agent's: the next line, then "answer 0".
func (s *Script) Act(toolworld.Task, string, bool) string {
	if s.next >= len(s.Lines) {
		return "answer 0"
	}
	s.next++
	return s.Lines[s.next-1]
}

// Played runs lines on task in the real task world and returns the rollout.
func Played(t *testing.T, task toolworld.Task, lines ...string) *rollout.Rollout {
	t.Helper()
	env, err := toolworld.New(task, tokenizer.NewBytes(), toolworld.Options{MaxTokens: 1024})
	require.NoError(t, err)
	_, err = toolworld.Play(env, &Script{Lines: lines}, len(lines)+1)
	require.NoError(t, err)
	return env.Rollout("t")
}
