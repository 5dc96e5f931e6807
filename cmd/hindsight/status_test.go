package main

import (
	"bytes"
	"context"
	"net"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/status"
)

// statusTestTimeout is the tests' hang guard for a call or a wait.
var statusTestTimeout = testwait.Guard(time.Minute)

func statusFixture() *hindsightv1.Status {
	return &hindsightv1.Status{
		Version:    "v0.0.0-test",
		State:      hindsightv1.State_STATE_READY,
		StartedAt:  timestamppb.New(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)),
		Uptime:     durationpb.New(90*time.Minute + 400*time.Millisecond),
		DataDir:    "/var/lib/hindsight",
		Storage:    &hindsightv1.StorageInfo{FsType: "nfs", RenameMode: "check-then-rename", Symlinks: true},
		ListenAddr: "127.0.0.1:7077",
		Spool:      &hindsightv1.SpoolCounts{Incoming: 3, Processing: 1, Done: 1040, Failed: 2},
		Total: &hindsightv1.IngestStats{
			FilesClaimed: 1046, FilesDone: 1040, RolloutsAccepted: 1200, TokensIngested: 98_000_000,
			JournalSeq: 1046, RolloutsPerSecond: 2.5, TokensPerSecond: 150_000,
		},
		Session:       &hindsightv1.IngestStats{FilesClaimed: 4, RolloutsAccepted: 100},
		LastError:     "read rollout x.arrow: bad schema",
		LastErrorAt:   timestamppb.New(time.Date(2026, 1, 2, 4, 0, 0, 0, time.UTC)),
		LastErrorFile: "spool/failed/x.arrow",
		Evals: []*hindsightv1.EvalResult{
			{Suite: "heldout", Kind: "toolworld", Step: 12, Checkpoint: "/ck/step-000012", Primary: "success", Complete: true,
				Metrics: map[string]float64{"success": 0.25, "tool_error_rate": 0.5}, TookSeconds: 3.25},
			{Suite: "unit", Kind: "command", Step: 12, Primary: "score", Error: "command ./eval.sh: exit status 3"},
		},
		Gateway: &hindsightv1.GatewayStats{ListenAddr: "127.0.0.1:7078", Model: "hindsight", PolicyStep: 12, Requests: 1500,
			Errors: 3, Turns: 1490, OpenSessions: 4, RolloutsRecorded: 310, FeedbackJoined: 7, FeedbackLate: 1, FeedbackPending: 2, HeldSessions: 2, HeldBytes: 4096, HeldWrittenEarly: 1, CommentsUnusable: 3,
			Ab: &hindsightv1.ABTest{Round: 2, Verdict: "collecting: 3 and 4 sessions with thumbs_up data (default, candidate), 100 each needed",
				Arms: []*hindsightv1.ABArm{{Role: "default", Step: 12, Sessions: 40, Rated: 3, ThumbsUp: 2, ThumbsUpRate: 0.667, ThumbsUpLow: 0.208, ThumbsUpHigh: 0.939},
					{Role: "candidate", Step: 14, Sessions: 9, Rated: 4, ThumbsUp: 4, ThumbsUpRate: 1, ThumbsUpLow: 0.51, ThumbsUpHigh: 1, Outcomes: 2}}}},
		EngineHooks: []*hindsightv1.EngineHookState{
			{Kind: "sglang", Url: "http://127.0.0.1:30000", LastCheckpoint: "/ck/step-000012", LastStep: 12,
				LastPushedAt: timestamppb.New(time.Date(2026, 1, 2, 4, 1, 0, 0, time.UTC)), Attempts: 2},
			{Kind: "vllm_lora", Url: "http://127.0.0.1:8000", Attempts: 3, Pushing: "/ck/step-000012",
				LastError:   "call http://127.0.0.1:8000/v1/load_lora_adapter (attempt 3/5): 503 Service Unavailable",
				LastErrorAt: timestamppb.New(time.Date(2026, 1, 2, 4, 2, 0, 0, time.UTC))},
		},
		BestEvals: []*hindsightv1.EvalResult{
			{Suite: "heldout", Kind: "toolworld", Step: 8, Checkpoint: "/ck/step-000008", Primary: "success",
				Metrics: map[string]float64{"success": 0.3}},
		},
	}
}

// startDaemon serves statusFixture on a free local port until the test ends.
func startDaemon(t *testing.T) *status.Server {
	t.Helper()
	s := status.NewServer("127.0.0.1:0", statusFixture, nil, zerolog.Nop())
	require.NoError(t, s.Start())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), statusTestTimeout)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
	})
	return s
}

// runStatus runs statusCmd with a deadline and returns its exit code and output.
func runStatus(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), statusTestTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := statusCmd(ctx, args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestStatusTable(t *testing.T) {
	s := startDaemon(t)
	for _, addr := range []string{s.Addr(), "http://" + s.Addr() + "/"} {
		t.Run(addr, func(t *testing.T) {
			code, out, errOut := runStatus(t, "-addr", addr)
			require.Equal(t, 0, code, "stderr: %s", errOut)
			for _, want := range []string{
				`^version +v0\.0\.0-test$`,
				`^state +ready$`,
				`^started +2026-01-02T03:04:05Z \(up 1h30m0s\)$`,
				`^data dir +/var/lib/hindsight$`,
				`^storage +nfs, renames: check-then-rename, symlinks: yes$`,
				`^spool +3 incoming, 1 processing, 1,040 done, 2 failed$`,
				`^ingest +total +this process$`,
				`^files claimed +1,046 +4$`,
				`^tokens ingested +98,000,000 +0$`,
				`^rollouts/s +2\.50 +0\.00$`,
				`^last error +read rollout x\.arrow: bad schema$`,
				`^  file +spool/failed/x\.arrow$`,
				`^eval heldout +step 12: success 0\.25, tool_error_rate 0\.5 in 3\.2s$`,
				`^  best +step 8: success 0\.3 \(/ck/step-000008\)$`,
				`^eval unit +step 12 failed: command \./eval\.sh: exit status 3$`,
				`^gateway +127\.0\.0\.1:7078 serving "hindsight" at step 12$`,
				`^  requests +1,500 \(3 errors\), 1,490 turns$`,
				`^  sessions +4 open, 310 recorded as rollouts$`,
				`^  late feedback +7 joined, 1 too late, 2 pending$`,
				`^  feedback window +2 held \(4,096 bytes\), 1 written early$`,
				`^  comments unusable +3$`,
				`^  A/B +round 2, collecting: 3 and 4 sessions with thumbs_up data \(default, candidate\), 100 each needed$`,
				`^    default +step 12: 40 sessions, thumbs-up 0\.667 \[0\.208, 0\.939\] of 3 rated, 0 outcomes$`,
				`^    candidate +step 14: 9 sessions, thumbs-up 1\.000 \[0\.510, 1\.000\] of 4 rated, 2 outcomes$`,
				`^engine hook +sglang http://127\.0\.0\.1:30000: last pushed step 12 at 2026-01-02T04:01:00Z, 2 attempts$`,
				`^engine hook +vllm_lora http://127\.0\.0\.1:8000: last pushed none yet, 3 attempts$`,
				`^  pushing +/ck/step-000012$`,
				`^  last error +call http://127\.0\.0\.1:8000/v1/load_lora_adapter \(attempt 3/5\): 503 Service Unavailable \(at 2026-01-02T04:02:00Z\)$`,
			} {
				require.Regexp(t, regexp.MustCompile("(?m)"+want), out)
			}
		})
	}
}

func TestStatusJSON(t *testing.T) {
	s := startDaemon(t)
	code, out, errOut := runStatus(t, "-addr", s.Addr(), "-json")
	require.Equal(t, 0, code, "stderr: %s", errOut)

	var got hindsightv1.Status
	require.NoError(t, protojson.Unmarshal([]byte(out), &got))
	require.True(t, proto.Equal(statusFixture(), &got), "got %v", &got)
	require.Contains(t, out, `"filesQuarantined": "0"`, "EmitUnpopulated should print zero fields")
	require.Contains(t, out, "\n  \"version\"", "output should be indented")
}

// syncBuffer is a bytes.Buffer that a running statusCmd writes to while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestStatusWatch(t *testing.T) {
	// watch starts `hindsight status -watch`, waits for two updates, and returns a
	// channel with its exit code.
	watch := func(t *testing.T, ctx context.Context, addr string) (<-chan int, *syncBuffer) {
		t.Helper()
		var stdout, stderr syncBuffer
		code := make(chan int, 1)
		go func() {
			code <- statusCmd(ctx, []string{"-addr", addr, "-watch", "-interval", "100ms"}, &stdout, &stderr)
		}()
		require.Eventually(t, func() bool { return strings.Count(stdout.String(), "version") >= 2 },
			statusTestTimeout, 10*time.Millisecond, "stdout: %s\nstderr: %s", &stdout, &stderr)
		return code, &stderr
	}

	t.Run("interrupted", func(t *testing.T) {
		s := startDaemon(t)
		ctx, cancel := context.WithTimeout(t.Context(), statusTestTimeout)
		defer cancel()
		code, stderr := watch(t, ctx, s.Addr())
		cancel() // as SIGINT does through main's signal context
		select {
		case c := <-code:
			require.Equal(t, 0, c, "stderr: %s", stderr)
		case <-time.After(statusTestTimeout):
			t.Fatal("statusCmd did not return after cancel")
		}
	})

	t.Run("daemon stops", func(t *testing.T) {
		s := startDaemon(t)
		code, stderr := watch(t, t.Context(), s.Addr())
		ctx, cancel := context.WithTimeout(t.Context(), statusTestTimeout)
		defer cancel()
		require.NoError(t, s.Shutdown(ctx))
		select {
		case c := <-code:
			require.Equal(t, 1, c)
			require.Contains(t, stderr.String(), "shutting down")
		case <-time.After(statusTestTimeout):
			t.Fatal("statusCmd did not return after the daemon shut down")
		}
	})
}

func TestStatusUnreachable(t *testing.T) {
	// A port that was free a moment ago: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	for _, args := range [][]string{{"-addr", addr}, {"-addr", addr, "-watch"}} {
		code, out, errOut := runStatus(t, args...)
		require.Equal(t, 1, code, "args %q", args)
		require.Empty(t, out)
		require.Contains(t, errOut, "hindsight status: cannot reach hindsightd at "+addr+": ")
	}
}

func TestStatusUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-nope"},
		{"extra"},
		{"-addr", "ftp://host:1"},
		{"-addr", "http://"},
		{"-timeout", "0s"},
		{"-watch", "-interval", "-1s"},
	} {
		code, out, errOut := runStatus(t, args...)
		require.Equal(t, 2, code, "args %q", args)
		require.Empty(t, out)
		require.NotEmpty(t, errOut)
	}
	code, _, errOut := runStatus(t, "-h")
	require.Equal(t, 0, code)
	require.Contains(t, errOut, "usage: hindsight status")
}

func TestStatusBaseURL(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7077":        "http://127.0.0.1:7077",
		"localhost:1":           "http://localhost:1",
		"http://10.0.0.1:7077/": "http://10.0.0.1:7077",
		"https://gpu-3.lan/hs":  "https://gpu-3.lan/hs",
		"[::1]:7077":            "http://[::1]:7077",
	} {
		got, err := statusBaseURL(addr)
		require.NoError(t, err, addr)
		require.Equal(t, want, got, addr)
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 98_000_000: "98,000,000"} {
		require.Equal(t, want, count(n))
	}
}

// TestStatusTableLossTerms: the training section prints the last step's two loss
// terms with their token counts, and the terms' gradient norms only when the daemon
// measured them (train.term_grad_norms).
func TestStatusTableLossTerms(t *testing.T) {
	for _, norms := range []bool{false, true} {
		st := statusFixture()
		st.Training = &hindsightv1.TrainingStats{Step: 4, Loss: 0.75, LossOut: 0.5, LossDistill: 0.25,
			OutTokens: 1200, DistillTokens: 96}
		if norms {
			st.Training.GradNormOut, st.Training.GradNormDistill = proto.Float64(1.5), proto.Float64(0.125)
		}
		s := status.NewServer("127.0.0.1:0", func() *hindsightv1.Status { return st }, nil, zerolog.Nop())
		require.NoError(t, s.Start())
		code, out, errOut := runStatus(t, "-addr", s.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), statusTestTimeout)
		require.NoError(t, s.Shutdown(ctx))
		cancel()
		require.Equal(t, 0, code, "stderr: %s", errOut)
		want := `^loss terms +outcome 0\.5 over 1,200 tokens, distillation 0\.25 over 96 tokens$`
		if norms {
			want = `^loss terms +outcome 0\.5 over 1,200 tokens, distillation 0\.25 over 96 tokens; grad norm outcome 1\.5, distillation 0\.125$`
		}
		require.Regexp(t, regexp.MustCompile("(?m)"+want), out)
	}
}

// TestStatusTableStepInProgress: the step on the device is one line (phase, rollouts
// and tokens done, elapsed, time left), and before any step finished the throughput
// line says so instead of "0 tokens/s" (issue 39 item 3).
func TestStatusTableStepInProgress(t *testing.T) {
	st := statusFixture()
	st.Training = &hindsightv1.TrainingStats{TokenBudget: 4096, StepInProgress: &hindsightv1.StepInProgress{Step: 1, Phase: "gradient",
		Rollouts: 32, Tokens: 640000, RolloutsScored: 32, TokensScored: 640000, RolloutsGradient: 5, TokensGradient: 100000,
		StartedAt: timestamppb.Now(), Elapsed: durationpb.New(312 * time.Second), Eta: durationpb.New(580 * time.Second)}}
	s := status.NewServer("127.0.0.1:0", func() *hindsightv1.Status { return st }, nil, zerolog.Nop())
	require.NoError(t, s.Start())
	code, out, errOut := runStatus(t, "-addr", s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), statusTestTimeout)
	require.NoError(t, s.Shutdown(ctx))
	cancel()
	require.Equal(t, 0, code, "stderr: %s", errOut)
	require.Regexp(t, regexp.MustCompile(`(?m)^step in progress +step 1, gradient passes: 32/32 rollouts scored \(640,000/640,000 tokens\), `+
		`5/32 gradients \(100,000/640,000 tokens\); 5m12s elapsed, about 9m40s left$`), out)
	require.Regexp(t, regexp.MustCompile(`(?m)^throughput +no step finished yet \(this process\)$`), out)
}
