// Package pjrttest finds the XLA CPU plugin for tests, and says which one a test uses
// and where it came from, so that no test runs on a plugin from the cache unnoticed.
package pjrttest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
)

// CPUPluginEnv is xla.CPUPluginEnv (xla's own tests import this package, so it cannot
// import xla; TestCPUPluginEnvMatches in xla keeps the two equal).
const CPUPluginEnv = "HINDSIGHT_XLA_CPU_PLUGIN"

// RequireEnv, when set (CI sets it), turns a missing plugin from a skip into a failure.
const RequireEnv = "HINDSIGHT_REQUIRE_XLA_CPU"

// FindCPU returns the XLA CPU plugin: $HINDSIGHT_XLA_CPU_PLUGIN, else the one
// `hindsight fetch-xla-cpu` put in the plugin cache; from says which, for the log.
func FindCPU() (path, from string, err error) {
	if p := os.Getenv(CPUPluginEnv); p != "" {
		if path, err = filepath.Abs(p); err != nil {
			return "", "", fmt.Errorf("$%s=%s: %w", CPUPluginEnv, p, err)
		}
		from = "$" + CPUPluginEnv
	} else {
		if path, err = pjrt.CPU.CachedPath(); err != nil {
			return "", "", err
		}
		from = fmt.Sprintf("the plugin cache (fetched by hindsight fetch-xla-cpu; $%s unset)", CPUPluginEnv)
	}
	if _, err := os.Stat(path); err != nil {
		return "", "", fmt.Errorf("XLA CPU plugin not available from %s (%v): run `hindsight fetch-xla-cpu` or set $%s", from, err, CPUPluginEnv)
	}
	return path, from, nil
}

// CPUPlugin returns the XLA CPU plugin for t and logs which one and where it came
// from; without one it skips t, or fails it when $HINDSIGHT_REQUIRE_XLA_CPU is set.
func CPUPlugin(t testing.TB) string {
	t.Helper()
	path, from, err := FindCPU()
	if err != nil {
		if os.Getenv(RequireEnv) != "" {
			t.Fatalf("XLA CPU plugin: %v", err)
		}
		t.Skipf("%v", err)
	}
	t.Logf("XLA CPU plugin %s, from %s", path, from)
	return path
}
