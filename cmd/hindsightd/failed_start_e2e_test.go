package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFailedStartLeavesNothing: a start that fails after the daemon took the lock and
// created the default model (a backend that does not load; a status port in use)
// exits 1 naming the cause and leaves no LOCK and no model behind, so the next start
// is a first start again (issue 39 item 5).
func TestFailedStartLeavesNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"backend": {[]string{"-backend", "xla:/nonexistent/pjrt_c_api_cpu_plugin.so", "-listen", "127.0.0.1:0"}, "/nonexistent/pjrt_c_api_cpu_plugin.so"},
		"port":    {[]string{"-listen", busy.Addr().String()}, "address already in use"},
	} {
		t.Run(name, func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			cmd := exec.Command(filepath.Join(binDir, "hindsightd"), append([]string{"-data-dir", dataDir}, tc.args...)...)
			cmd.Env = append(os.Environ(), "NOTIFY_SOCKET=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			require.Error(t, cmd.Run())
			require.Equal(t, 1, cmd.ProcessState.ExitCode(), stderr.String())
			require.Contains(t, stderr.String(), tc.want)
			require.Contains(t, stderr.String(), "created the default model", "the start got as far as the model")
			require.Contains(t, stderr.String(), "start failed; removed the model it created")
			require.NoFileExists(t, filepath.Join(dataDir, "LOCK"))
			require.NoDirExists(t, filepath.Join(dataDir, "model"))
		})
	}
}
