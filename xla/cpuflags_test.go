package xla

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSetCPUFlags: the fusion and scheduler options are added for a CPU plugin
// that knows them (each on its own), not for one that does not, not for a plugin
// that is not a CPU one, and never over a user's own setting.
func TestSetCPUFlags(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	// The option's name straddles the 4 MiB pieces fileContains reads.
	pad := strings.Repeat("x", 4<<20-10)
	knows := write("pjrt_c_api_cpu_plugin.so", pad+cpuFusionOption+"\x00"+cpuSchedulerOption+"\x00")
	fusionOnly := write("fusion_cpu_plugin.so", pad+cpuFusionOption+"\x00")
	old := write("old_cpu_plugin.so", pad)
	gpu := write("pjrt_c_api_gpu_plugin.so", cpuFusionOption+cpuSchedulerOption)
	fusion := "--" + cpuFusionOption + "=" + cpuFusionValue
	sched := "--" + cpuSchedulerOption + "=false"
	for _, c := range []struct {
		plugin, env, want string
	}{
		{knows, "", fusion + " " + sched},
		{knows, "--xla_dump_to=/d", "--xla_dump_to=/d " + fusion + " " + sched},
		{knows, "--" + cpuFusionOption + "=", "--" + cpuFusionOption + "= " + sched},
		{knows, "--" + cpuSchedulerOption + "=true", "--" + cpuSchedulerOption + "=true " + fusion},
		{fusionOnly, "", fusion},
		{old, "", ""},
		{gpu, "", ""},
	} {
		t.Setenv(xlaFlagsEnv, c.env)
		require.NoError(t, setCPUFlags(c.plugin))
		require.Equal(t, c.want, os.Getenv(xlaFlagsEnv), "%s with $XLA_FLAGS=%q", filepath.Base(c.plugin), c.env)
	}
	require.ErrorContains(t, setCPUFlags(filepath.Join(dir, "missing_cpu.so")), "missing_cpu.so")
}
