package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/xla"
)

// xlaCPUOrSkip skips a test without the XLA CPU plugin, or fails it where CI asks
// for XLA ($HINDSIGHT_REQUIRE_XLA_CPU).
func xlaCPUOrSkip(t *testing.T) {
	t.Helper()
	path, err := xla.CPUPluginPath()
	if err == nil {
		_, err = os.Stat(path)
	}
	if err != nil {
		if os.Getenv("HINDSIGHT_REQUIRE_XLA_CPU") != "" {
			t.Fatalf("XLA CPU plugin: %v", err)
		}
		t.Skipf("XLA CPU plugin not available: %v", err)
	}
}

// TestTrainTwoDevices runs the real daemon on two XLA CPU devices (backend
// `xla-cpu,devices=2`, train.devices: all, the optimizer sharded): it trains and
// checkpoints, and logs the device count; asking for more devices than the backend
// has is a start-up error.
func TestTrainTwoDevices(t *testing.T) {
	xlaCPUOrSkip(t)
	_, path := spoolWithRollouts(t, 4, 2, "  token_budget: 256\n  chunk: 64\n  devices: all\n  shard_optimizer: true\n  idle_flush: 500ms\n  checkpoint: {every_steps: 1, keep: 2}\n")
	p := startDaemon(t, "-config", path, "-backend", "xla-cpu,devices=2")
	addr := p.waitReady(t)
	st := waitTrained(t, p, addr, 4)
	require.Positive(t, st.GetTraining().GetUpdates())
	p.stop(t, 60*time.Second)
	require.Contains(t, p.log(), `"devices":2`)

	_, path = spoolWithRollouts(t, 2, 2, "  devices: 3\n")
	p = startDaemon(t, "-config", path, "-backend", "xla-cpu,devices=2")
	code := p.wait(t, 60*time.Second)
	require.NotEqual(t, 0, code)
	require.True(t, strings.Contains(p.log(), "train.devices: 3, but backend xla has 2"), p.log())
}

// TestLoopBF16TwoDevices runs the inner loop (`-loop`: the collector samples with the
// newest checkpoint, the daemon trains) in bf16 on two XLA CPU devices: the policy
// loads in bf16, steps run on both devices, and checkpoints are written.
func TestLoopBF16TwoDevices(t *testing.T) {
	xlaCPUOrSkip(t)
	dataDir := t.TempDir()
	p, addr := startConfigured(t, dataDir, `model: {precision: bf16}
train:
  token_budget: 384
  chunk: 64
  devices: 2
  idle_flush: 500ms
  seed: 3
  optimizer: {lr: 0.001, warmup_steps: 1}
  checkpoint: {every_steps: 1, keep: 3}
`, "-loop", "-loop-group", "4", "-backend", "xla-cpu,devices=2")
	p.waitFor(t, 15*time.Minute, "a second update", func() bool {
		time.Sleep(200 * time.Millisecond) // one status query at a time
		return statusOf(t, addr).GetTraining().GetUpdates() >= 2
	})
	p.stop(t, 2*time.Minute)
	require.Contains(t, p.log(), `"devices":2`)
	require.Contains(t, p.log(), `"precision":"bf16"`)
	steps, err := filepath.Glob(filepath.Join(dataDir, "checkpoints", "step-*"))
	require.NoError(t, err)
	require.NotEmpty(t, steps)
}
