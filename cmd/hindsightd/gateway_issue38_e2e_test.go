package main

import (
	"encoding/json"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chatTurn sends one recorded turn under session (may be "") and returns the
// status and the answer.
func chatTurn(t *testing.T, base, session string, msgs []map[string]any, seed int) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 6, "seed": seed})
	return post(t, base+"/chat/completions", gatewayKey, session, string(body))
}

// errorCode returns an OpenAI-shaped error's code ("" when none).
func errorCode(t *testing.T, v map[string]any) string {
	t.Helper()
	e, ok := v["error"].(map[string]any)
	require.True(t, ok, "an OpenAI-shaped error: %v", v)
	require.NotEmpty(t, e["message"])
	code, _ := e["code"].(string)
	return code
}

// TestGatewayReusedSessionRefused (issue 38, item 1): a session id names one
// rollout. A request that names a session already written to the spool is refused
// with 409 session_closed, before and after a restart, instead of being answered
// and then lost as a duplicate rollout; the one rollout holds the first
// conversation and nothing lands in failed/.
func TestGatewayReusedSessionRefused(t *testing.T) {
	dataDir := t.TempDir()
	p, base := startGateway(t, dataDir)
	msgs := []map[string]any{{"role": "user", "content": "first conversation"}}
	status, v := chatTurn(t, base, "dup-1", msgs, 1)
	require.Equal(t, 200, status, v)
	first := v["id"].(string)
	status, v = post(t, base+"/sessions/dup-1/close", gatewayKey, "", `{"reward": 1}`)
	require.Equal(t, 200, status, v)

	again := []map[string]any{{"role": "user", "content": "second conversation"}}
	status, v = chatTurn(t, base, "dup-1", again, 2)
	require.Equal(t, 409, status, v)
	require.Equal(t, "session_closed", errorCode(t, v))
	// A conversation that extends the closed one under its header is refused too.
	status, v = chatTurn(t, base, "dup-1", append(msgs, map[string]any{"role": "assistant", "content": "x"}, map[string]any{"role": "user", "content": "go on"}), 3)
	require.Equal(t, 409, status, v)

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, 30*time.Second))
	p2, base2 := startGateway(t, dataDir)
	status, v = chatTurn(t, base2, "dup-1", again, 2)
	require.Equal(t, 409, status, "the gateway remembers the sessions it wrote across a restart: %v", v)
	require.Equal(t, "session_closed", errorCode(t, v))
	// A rating by the first conversation's completion id still lands on its rollout.
	status, v = post(t, base2+"/feedback", gatewayKey, "", `{"completion_id":"`+first+`","rating":1}`)
	require.Equal(t, 200, status, v)
	require.Equal(t, true, v["late"])

	got := doneRollouts(t, dataDir, 1)
	ro := got["dup-1"]
	require.NotNil(t, ro)
	require.Equal(t, []string{"user", "assistant"}, kinds(ro), "the one rollout is the first conversation")
	require.NoError(t, p2.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p2.wait(t, 30*time.Second))
	require.Len(t, mustGlob(t, filepath.Join(dataDir, "spool", "*", "*gateway-dup-1*")), 1, "written once, nothing failed")
}
