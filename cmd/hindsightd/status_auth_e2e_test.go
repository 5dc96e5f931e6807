package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/apikey"
)

// TestStatusKeysAndTLS serves the status port over TLS with status_keys_file: a
// client that trusts the certificate gets /healthz without a key, but status,
// metrics and the pages only with one; plain HTTP is refused; hindsight status and
// hindsight pause send $HINDSIGHT_STATUS_KEY over https with -cacert.
func TestStatusKeysAndTLS(t *testing.T) {
	dataDir := t.TempDir()
	const key = "hs-status-key-0123456789"
	keys := filepath.Join(dataDir, "status-keys")
	require.NoError(t, os.WriteFile(keys, []byte(apikey.Hash(key)+"\n"), 0o600))
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	cfg := filepath.Join(dataDir, "hindsightd.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\nlog: {format: json}\ntrain: {enabled: false}\n"+
		"status_keys_file: %s\nstatus_tls_cert_file: %s\nstatus_tls_key_file: %s\n", dataDir, keys, certFile, keyFile)), 0o644))
	p := startDaemon(t, "-config", cfg)
	addr := p.waitReady(t)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	get := func(url, bearer string) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		require.NoError(t, err)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	base := "https://" + addr
	require.Equal(t, 200, get(base+"/healthz", ""), "probes need no key")
	for _, path := range []string{"/metrics", "/", "/status/history.json", "/hindsight.v1.StatusService/GetStatus?encoding=json&message=%7B%7D"} {
		require.Equal(t, 401, get(base+path, ""), path)
		require.Equal(t, 401, get(base+path, "wrong"), path)
		require.Equal(t, 200, get(base+path, key), path)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 400, resp.StatusCode, "plain HTTP to the TLS port")

	_, stderr, code := runCLI(t, "status", "-addr", base, "-cacert", certFile)
	require.Equal(t, 1, code, "no key: %s", stderr)
	t.Setenv("HINDSIGHT_STATUS_KEY", key)
	out, stderr, code := runCLI(t, "status", "-addr", base, "-cacert", certFile)
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^state +ready$`, out)
	_, stderr, code = runCLI(t, "status", "-addr", base)
	require.Equal(t, 1, code, "an untrusted certificate: %s", stderr)
	out, stderr, code = runCLI(t, "pause", "-addr", base, "-cacert", certFile, "-reason", "tls")
	require.Equal(t, 0, code, "without control keys, control takes the status key: %s", stderr)
	require.Contains(t, out, "paused by ")
	require.NotContains(t, p.log(), key, "the key is never logged")
	p.stop(t, 30*time.Second)
}
