// Package statustest starts a real status.Server for tests and holds the clients
// that talk to it (h2c for gRPC, plain GET for the pages), so the status package's
// tests and the daemon's share one way to do it.
package statustest

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/status"
)

// Timeout is the tests' hang guard for a call or a wait; the server answers in
// milliseconds.
var Timeout = testwait.Guard(time.Minute)

// Start starts a status.Server on a free local port and shuts it down when the test
// ends. It returns the server and its base URL (http://host:port).
func Start(t *testing.T, snapshot func() *hindsightv1.Status, gatherer prometheus.Gatherer) (*status.Server, string) {
	t.Helper()
	s := status.NewServer("127.0.0.1:0", snapshot, gatherer, zerolog.New(zerolog.NewTestWriter(t)))
	require.NoError(t, s.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), Timeout)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
	})
	return s, "http://" + s.Addr()
}

// H2CClient speaks HTTP/2 without TLS, as gRPC clients do. Its connections are closed
// before the server shuts down, which otherwise waits up to 1s for the client to hang up.
func H2CClient(t *testing.T) *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{Protocols: protocols}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

// Context is the test's context bounded by Timeout.
func Context(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// Get fetches url and returns the status code, the body and the headers.
func Get(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(Context(t), http.MethodGet, url, nil)
	require.NoError(t, err)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(body), res.Header
}
