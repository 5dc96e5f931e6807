package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
	"github.com/hindsight-ai/hindsight/xla"
)

// The daemons these tests start run on pure Go unless a test names another backend
// (its config, -backend, or $GOMLX_BACKEND when set for the whole run): hindsightd's
// default, auto, would otherwise take the XLA CPU plugin wherever it has been fetched
// (~/.cache, $HINDSIGHT_XLA_CPU_PLUGIN in CI). Each daemon logs its choice ("backend
// chosen", with the reason), which a failing test's log shows.
func init() {
	if os.Getenv("GOMLX_BACKEND") == "" {
		os.Setenv("GOMLX_BACKEND", xla.DefaultBackend)
	}
}

// freshMachine is the environment of a machine where nothing was fetched and no
// backend is named: an empty plugin cache, no plugin variables, no $GOMLX_BACKEND.
func freshMachine(t *testing.T) []string {
	return []string{"GOMLX_BACKEND=", xla.CPUPluginEnv + "=", xla.GPUPluginEnv + "=", pjrt.CacheEnv + "=" + t.TempDir()}
}

// TestDemoFreshMachine runs the README's quick start (hindsightd -demo) where no
// plugin was fetched: auto picks pure Go and the demo says why.
func TestDemoFreshMachine(t *testing.T) {
	env := freshMachine(t)
	out := demoOn(t, t.TempDir(), env, false)
	require.Contains(t, out, " on go (go:parallelism=-1), cpu: pure Go")
	require.Contains(t, out, "backend: auto (the default): no GPU plugin ($HINDSIGHT_XLA_GPU_PLUGIN unset); XLA CPU plugin not fetched (no ")
	require.Contains(t, out, "`hindsight fetch-xla-cpu` fetches it); pure Go\n")
}

// TestBackendAuto starts the daemon with the XLA CPU plugin fetched and no backend
// named: it trains on XLA and logs and reports why; -backend go overrides auto.
func TestBackendAuto(t *testing.T) {
	plugin, err := xla.CPUPluginPath()
	require.NoError(t, err)
	if _, err := os.Stat(plugin); err != nil {
		if os.Getenv("HINDSIGHT_REQUIRE_XLA_CPU") != "" {
			t.Fatalf("XLA CPU plugin: %v", err)
		}
		t.Skipf("XLA CPU plugin not fetched (%v)", err)
	}
	env := append(freshMachine(t), xla.CPUPluginEnv+"="+plugin)
	for _, tc := range []struct {
		name, flag, backend, choice string
	}{
		{name: "auto", backend: "xla", choice: "auto (the default): no GPU plugin ($HINDSIGHT_XLA_GPU_PLUGIN unset); XLA CPU plugin " +
			plugin + " ($HINDSIGHT_XLA_CPU_PLUGIN)"},
		{name: "flag", flag: "go", backend: "go", choice: "go from -backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"-config", trainConfig(t, t.TempDir())}
			if tc.flag != "" {
				args = append(args, "-backend", tc.flag)
			}
			p := startDaemonEnv(t, env, args...)
			addr := p.waitReady(t)
			require.Contains(t, p.log(), `"reason":"`+tc.choice+`"`)
			require.Contains(t, p.log(), `"message":"backend chosen"`)
			b := statusOf(t, addr).GetBackend()
			require.True(t, strings.HasPrefix(b.GetName(), tc.backend+" ("), "backend %s", b.GetName())
			require.Equal(t, tc.choice, b.GetChoice())
			out, _, code := runCLI(t, "status", "-addr", addr)
			require.Equal(t, 0, code)
			require.Contains(t, out, tc.choice)
			p.stop(t, 60*time.Second)
		})
	}
}
