package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
	"github.com/hindsight-ai/hindsight/internal/apikey"
	"github.com/hindsight-ai/hindsight/internal/testwait"
)

// testTimeout bounds every call a test makes; the server answers in milliseconds.
// testTimeout is the tests' hang guard for a call or a wait.
var testTimeout = testwait.Guard(time.Minute)

func testStatus() *hindsightv1.Status {
	return &hindsightv1.Status{
		Version:    "v0.0.0-test",
		State:      hindsightv1.State_STATE_READY,
		StartedAt:  timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		Uptime:     durationpb.New(90 * time.Minute),
		DataDir:    "/var/lib/hindsight",
		ListenAddr: "127.0.0.1:7077",
		Spool:      &hindsightv1.SpoolCounts{Incoming: 3, Processing: 1, Done: 40, Failed: 2},
		Total: &hindsightv1.IngestStats{
			FilesClaimed: 44, FilesDone: 40, FilesFailed: 1, FilesQuarantined: 1,
			RolloutsAccepted: 1200, RolloutsRejected: 7, TokensIngested: 98_000_000,
			JournalSeq: 44, RolloutsPerSecond: 2.5, TokensPerSecond: 150_000,
		},
		Session:       &hindsightv1.IngestStats{FilesClaimed: 4, RolloutsAccepted: 100},
		LastError:     "read rollout x.arrow: bad schema",
		LastErrorAt:   timestamppb.New(time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)),
		LastErrorFile: "spool/failed/x.arrow",
	}
}

// startServer starts a Server on a free local port and shuts it down when the test ends.
func startServer(t *testing.T, snapshot func() *hindsightv1.Status, gatherer prometheus.Gatherer) (*Server, string) {
	t.Helper()
	s := NewServer("127.0.0.1:0", snapshot, gatherer, zerolog.New(zerolog.NewTestWriter(t)))
	require.NoError(t, s.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
	})
	return s, "http://" + s.Addr()
}

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do. Its connections are closed
// before the server shuts down, which otherwise waits up to 1s for the client to hang up.
func h2cClient(t *testing.T) *http.Client {
	protocols := new(http.Protocols)
	protocols.SetUnencryptedHTTP2(true)
	transport := &http.Transport{Protocols: protocols}
	t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func TestServerGetStatusGRPC(t *testing.T) {
	want := testStatus()
	_, base := startServer(t, func() *hindsightv1.Status { return want }, nil)
	client := hindsightv1connect.NewStatusServiceClient(h2cClient(t), base, connect.WithGRPC())

	resp, err := client.GetStatus(testCtx(t), connect.NewRequest(&hindsightv1.GetStatusRequest{}))
	require.NoError(t, err)
	require.True(t, proto.Equal(want, resp.Msg.GetStatus()), "got %v", resp.Msg.GetStatus())
}

func TestServerGetStatusJSON(t *testing.T) {
	_, base := startServer(t, testStatus, nil)
	client := &http.Client{Timeout: testTimeout}

	check := func(t *testing.T, resp *http.Response) {
		t.Helper()
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "body: %s", body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))

		var got struct {
			Status struct {
				Version string `json:"version"`
				State   string `json:"state"`
				DataDir string `json:"dataDir"`
				Uptime  string `json:"uptime"`
				Spool   struct {
					Done string `json:"done"` // protojson writes int64 as a string
				} `json:"spool"`
				Total struct {
					RolloutsAccepted string  `json:"rolloutsAccepted"`
					TokensPerSecond  float64 `json:"tokensPerSecond"`
				} `json:"total"`
				LastErrorAt string `json:"lastErrorAt"`
			} `json:"status"`
		}
		require.NoError(t, json.Unmarshal(body, &got), "body: %s", body)
		require.Equal(t, "v0.0.0-test", got.Status.Version)
		require.Equal(t, "STATE_READY", got.Status.State)
		require.Equal(t, "/var/lib/hindsight", got.Status.DataDir)
		require.Equal(t, "5400s", got.Status.Uptime)
		require.Equal(t, "40", got.Status.Spool.Done)
		require.Equal(t, "1200", got.Status.Total.RolloutsAccepted)
		require.InDelta(t, 150_000, got.Status.Total.TokensPerSecond, 0)
		require.Equal(t, "2026-01-02T04:00:00Z", got.Status.LastErrorAt)
	}

	t.Run("POST", func(t *testing.T) {
		req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost,
			base+hindsightv1connect.StatusServiceGetStatusProcedure, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		check(t, resp)
	})
	t.Run("GET", func(t *testing.T) {
		q := url.Values{"encoding": {"json"}, "message": {"{}"}, "connect": {"v1"}}
		req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet,
			base+hindsightv1connect.StatusServiceGetStatusProcedure+"?"+q.Encode(), nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		check(t, resp)
	})
}

func TestServerNoSnapshotYet(t *testing.T) {
	_, base := startServer(t, func() *hindsightv1.Status { return nil }, nil)
	client := hindsightv1connect.NewStatusServiceClient(&http.Client{Timeout: testTimeout}, base)

	_, err := client.GetStatus(testCtx(t), connect.NewRequest(&hindsightv1.GetStatusRequest{}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "err: %v", err)
}

func TestServerWatchStatus(t *testing.T) {
	s, base := startServer(t, testStatus, nil)
	client := hindsightv1connect.NewStatusServiceClient(h2cClient(t), base, connect.WithGRPC())
	req := connect.NewRequest(&hindsightv1.WatchStatusRequest{Interval: durationpb.New(time.Millisecond)})

	t.Run("client cancels", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
		defer cancel()
		stream, err := client.WatchStatus(ctx, req)
		require.NoError(t, err)
		for range 2 {
			require.True(t, stream.Receive(), "stream ended early: %v", stream.Err())
			require.Equal(t, "v0.0.0-test", stream.Msg().GetStatus().GetVersion())
		}
		cancel()
		for stream.Receive() {
		}
		require.Equal(t, connect.CodeCanceled, connect.CodeOf(stream.Err()), "err: %v", stream.Err())
		require.NoError(t, stream.Close())
	})

	t.Run("shutdown ends the stream", func(t *testing.T) {
		stream, err := client.WatchStatus(testCtx(t), connect.NewRequest(&hindsightv1.WatchStatusRequest{
			Interval: durationpb.New(time.Hour), // only Shutdown can end it in time
		}))
		require.NoError(t, err)
		require.True(t, stream.Receive(), "no first message: %v", stream.Err())

		shutdownErr := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			shutdownErr <- s.Shutdown(ctx)
		}()
		require.False(t, stream.Receive())
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(stream.Err()), "err: %v", stream.Err())
		require.NoError(t, <-shutdownErr) // the stream, an hour between messages, ended by Shutdown
		require.NoError(t, stream.Close())
	})
}

func TestWatchInterval(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval *durationpb.Duration
		want     time.Duration
		wantCode connect.Code
	}{
		{name: "unset", want: time.Second},
		{name: "zero", interval: durationpb.New(0), want: time.Second},
		{name: "below minimum", interval: durationpb.New(time.Millisecond), want: 100 * time.Millisecond},
		{name: "as asked", interval: durationpb.New(5 * time.Second), want: 5 * time.Second},
		{name: "negative", interval: durationpb.New(-time.Second), wantCode: connect.CodeInvalidArgument},
		{name: "invalid", interval: &durationpb.Duration{Seconds: 1, Nanos: -1}, wantCode: connect.CodeInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := watchInterval(&hindsightv1.WatchStatusRequest{Interval: tc.interval})
			if tc.wantCode != 0 {
				require.Equal(t, tc.wantCode, connect.CodeOf(err), "err: %v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestServerHealth(t *testing.T) {
	s, base := startServer(t, testStatus, nil)
	client := grpchealth.NewClient(h2cClient(t), base, connect.WithGRPC())
	httpClient := &http.Client{Timeout: testTimeout}

	check := func(t *testing.T, want grpchealth.Status, wantHTTP int) {
		t.Helper()
		for _, service := range []string{"", hindsightv1connect.StatusServiceName} {
			resp, err := client.Check(testCtx(t), &grpchealth.CheckRequest{Service: service})
			require.NoError(t, err)
			require.Equal(t, want, resp.Status, "service %q", service)
		}
		req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, base+"/healthz", nil)
		require.NoError(t, err)
		resp, err := httpClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, wantHTTP, resp.StatusCode)
	}

	check(t, grpchealth.StatusServing, http.StatusOK)
	s.SetServing(false)
	check(t, grpchealth.StatusNotServing, http.StatusServiceUnavailable)
	s.SetServing(true)
	check(t, grpchealth.StatusServing, http.StatusOK)
}

func TestServerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsight_test_events_total", Help: "Test events."})
	reg.MustRegister(counter)
	counter.Add(3)
	_, base := startServer(t, testStatus, reg)

	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Timeout: testTimeout}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "hindsight_test_events_total 3\n")
}

func TestServerReflection(t *testing.T) {
	_, base := startServer(t, testStatus, nil)
	client := grpcreflect.NewClient(h2cClient(t), base, connect.WithGRPC())
	stream := client.NewStream(testCtx(t))
	defer func() { _, _ = stream.Close() }()

	names, err := stream.ListServices()
	require.NoError(t, err)
	require.Contains(t, names, hindsightv1.File_hindsight_v1_status_proto.Services().Get(0).FullName())

	files, err := stream.FileContainingSymbol(hindsightv1connect.StatusServiceName)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	require.Equal(t, "hindsight/v1/status.proto", files[0].GetName())
}

func TestServerStartOccupiedPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()

	s := NewServer(addr, testStatus, nil, zerolog.Nop())
	err = s.Start()
	require.Error(t, err)
	require.Contains(t, err.Error(), addr)

	var opErr *net.OpError
	require.True(t, errors.As(err, &opErr), "err %v should wrap the listen error", err)
}

func TestServerStartTwice(t *testing.T) {
	s, _ := startServer(t, testStatus, nil)
	require.ErrorContains(t, s.Start(), "already started")
}

// fakeController pauses nothing; it answers with the pause state asked for.
type fakeController struct{}

func (fakeController) Pause(by, reason string) *hindsightv1.PauseState {
	return &hindsightv1.PauseState{Operator: true, By: by, Reason: reason}
}
func (fakeController) Resume(string) *hindsightv1.PauseState { return &hindsightv1.PauseState{} }

// TestStatusKeys: with status keys every route but /healthz and gRPC health needs
// one; ControlService takes its own keys when it has them (not the status keys),
// else the status keys.
func TestStatusKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, key string) *apikey.Keys {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(apikey.Hash(key)+"\n"), 0o600))
		k, err := apikey.Load(path, name)
		require.NoError(t, err)
		return k
	}
	status, control := write("status", "s-key"), write("control", "c-key")
	for _, withControl := range []bool{true, false} {
		s := NewServer("127.0.0.1:0", testStatus, prometheus.NewRegistry(), zerolog.Nop())
		s.SetController(fakeController{})
		s.SetStatusKeys(status)
		if withControl {
			s.SetControlKeys(control)
		}
		require.NoError(t, s.Start())
		base := "http://" + s.Addr()
		do := func(method, path, key string) int {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader(`{"reason":"x"}`)
			}
			req, err := http.NewRequestWithContext(testCtx(t), method, base+path, body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Equal(t, 200, do(http.MethodGet, "/healthz", ""))
		require.Equal(t, 200, do(http.MethodPost, "/grpc.health.v1.Health/Check", ""), "gRPC health is open")
		require.Equal(t, 401, do(http.MethodGet, "/metrics", ""))
		require.Equal(t, 401, do(http.MethodGet, "/metrics", "c-key"))
		require.Equal(t, 200, do(http.MethodGet, "/metrics", "s-key"))
		require.Equal(t, 401, do(http.MethodPost, "/hindsight.v1.StatusService/GetStatus", ""))
		require.Equal(t, 200, do(http.MethodPost, "/hindsight.v1.StatusService/GetStatus", "s-key"))
		pause := "/hindsight.v1.ControlService/Pause"
		require.Equal(t, 401, do(http.MethodPost, pause, ""))
		if withControl {
			require.Equal(t, 200, do(http.MethodPost, pause, "c-key"))
			require.Equal(t, 401, do(http.MethodPost, pause, "s-key"), "control keeps its own keys")
		} else {
			require.Equal(t, 200, do(http.MethodPost, pause, "s-key"))
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		require.NoError(t, s.Shutdown(ctx))
		cancel()
	}
}
