package status_test

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
	"github.com/hindsight-ai/hindsight/status"
	"github.com/hindsight-ai/hindsight/status/statustest"
)

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

func TestServerGetStatusGRPC(t *testing.T) {
	want := testStatus()
	_, base := statustest.Start(t, func() *hindsightv1.Status { return want }, nil)
	client := hindsightv1connect.NewStatusServiceClient(statustest.H2CClient(t), base, connect.WithGRPC())

	resp, err := client.GetStatus(statustest.Context(t), connect.NewRequest(&hindsightv1.GetStatusRequest{}))
	require.NoError(t, err)
	require.True(t, proto.Equal(want, resp.Msg.GetStatus()), "got %v", resp.Msg.GetStatus())
}

func TestServerGetStatusJSON(t *testing.T) {
	_, base := statustest.Start(t, testStatus, nil)
	client := &http.Client{Timeout: statustest.Timeout}

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
		req, err := http.NewRequestWithContext(statustest.Context(t), http.MethodPost,
			base+hindsightv1connect.StatusServiceGetStatusProcedure, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		require.NoError(t, err)
		check(t, resp)
	})
	t.Run("GET", func(t *testing.T) {
		q := url.Values{"encoding": {"json"}, "message": {"{}"}, "connect": {"v1"}}
		req, err := http.NewRequestWithContext(statustest.Context(t), http.MethodGet,
			base+hindsightv1connect.StatusServiceGetStatusProcedure+"?"+q.Encode(), nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		check(t, resp)
	})
}

func TestServerNoSnapshotYet(t *testing.T) {
	_, base := statustest.Start(t, func() *hindsightv1.Status { return nil }, nil)
	client := hindsightv1connect.NewStatusServiceClient(&http.Client{Timeout: statustest.Timeout}, base)

	_, err := client.GetStatus(statustest.Context(t), connect.NewRequest(&hindsightv1.GetStatusRequest{}))
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "err: %v", err)
}

func TestServerWatchStatus(t *testing.T) {
	s, base := statustest.Start(t, testStatus, nil)
	client := hindsightv1connect.NewStatusServiceClient(statustest.H2CClient(t), base, connect.WithGRPC())
	req := connect.NewRequest(&hindsightv1.WatchStatusRequest{Interval: durationpb.New(time.Millisecond)})

	t.Run("client cancels", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), statustest.Timeout)
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
		stream, err := client.WatchStatus(statustest.Context(t), connect.NewRequest(&hindsightv1.WatchStatusRequest{
			Interval: durationpb.New(time.Hour), // only Shutdown can end it in time
		}))
		require.NoError(t, err)
		require.True(t, stream.Receive(), "no first message: %v", stream.Err())

		shutdownErr := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), statustest.Timeout)
			defer cancel()
			shutdownErr <- s.Shutdown(ctx)
		}()
		require.False(t, stream.Receive())
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(stream.Err()), "err: %v", stream.Err())
		require.NoError(t, <-shutdownErr) // the stream, an hour between messages, ended by Shutdown
		require.NoError(t, stream.Close())
	})
}

func TestServerHealth(t *testing.T) {
	s, base := statustest.Start(t, testStatus, nil)
	client := grpchealth.NewClient(statustest.H2CClient(t), base, connect.WithGRPC())
	httpClient := &http.Client{Timeout: statustest.Timeout}

	check := func(t *testing.T, want grpchealth.Status, wantHTTP int) {
		t.Helper()
		for _, service := range []string{"", hindsightv1connect.StatusServiceName} {
			resp, err := client.Check(statustest.Context(t), &grpchealth.CheckRequest{Service: service})
			require.NoError(t, err)
			require.Equal(t, want, resp.Status, "service %q", service)
		}
		req, err := http.NewRequestWithContext(statustest.Context(t), http.MethodGet, base+"/healthz", nil)
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
	_, base := statustest.Start(t, testStatus, reg)

	req, err := http.NewRequestWithContext(statustest.Context(t), http.MethodGet, base+"/metrics", nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Timeout: statustest.Timeout}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "hindsight_test_events_total 3\n")
}

func TestServerReflection(t *testing.T) {
	_, base := statustest.Start(t, testStatus, nil)
	client := grpcreflect.NewClient(statustest.H2CClient(t), base, connect.WithGRPC())
	stream := client.NewStream(statustest.Context(t))
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

	s := status.NewServer(addr, testStatus, nil, zerolog.Nop())
	err = s.Start()
	require.Error(t, err)
	require.Contains(t, err.Error(), addr)

	var opErr *net.OpError
	require.True(t, errors.As(err, &opErr), "err %v should wrap the listen error", err)
}

func TestServerStartTwice(t *testing.T) {
	s, _ := statustest.Start(t, testStatus, nil)
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
	statusKeys, control := write("status", "s-key"), write("control", "c-key")
	for _, withControl := range []bool{true, false} {
		s := status.NewServer("127.0.0.1:0", testStatus, prometheus.NewRegistry(), zerolog.Nop())
		s.SetController(fakeController{})
		s.SetStatusKeys(statusKeys)
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
			req, err := http.NewRequestWithContext(statustest.Context(t), method, base+path, body)
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
		ctx, cancel := context.WithTimeout(context.Background(), statustest.Timeout)
		require.NoError(t, s.Shutdown(ctx))
		cancel()
	}
}

func TestServerControlUnimplemented(t *testing.T) {
	_, base := statustest.Start(t, testStatus, nil)
	ctrl := hindsightv1connect.NewControlServiceClient(statustest.H2CClient(t), base)
	_, err := ctrl.Pause(statustest.Context(t), connect.NewRequest(&hindsightv1.PauseRequest{}))
	require.Equal(t, connect.CodeUnimplemented, connect.CodeOf(err))
}

// TestServerControlLimits: a pause reason or a by longer than 512 bytes is
// INVALID_ARGUMENT, and the controller is not called.
func TestServerControlLimits(t *testing.T) {
	s, base := statustest.Start(t, testStatus, nil)
	s.SetController(fakeController{})
	ctrl := hindsightv1connect.NewControlServiceClient(statustest.H2CClient(t), base, connect.WithGRPC())
	long := strings.Repeat("x", 513)
	_, err := ctrl.Pause(statustest.Context(t), connect.NewRequest(&hindsightv1.PauseRequest{Reason: long}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = ctrl.Pause(statustest.Context(t), connect.NewRequest(&hindsightv1.PauseRequest{By: long}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = ctrl.Resume(statustest.Context(t), connect.NewRequest(&hindsightv1.ResumeRequest{By: long}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
	_, err = ctrl.Pause(statustest.Context(t), connect.NewRequest(&hindsightv1.PauseRequest{Reason: long[:512]}))
	require.NoError(t, err, "512 bytes is within the limit")
}
