package status_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/fsutil"

	"github.com/hindsight-ai/hindsight/status"
	"github.com/hindsight-ai/hindsight/status/statustest"
)

// writeTestCredit writes a one-rollout credit file over the byte tokenizer into dir.
func writeTestCredit(t *testing.T, dir, name, text string) {
	t.Helper()
	tok := tokenizer.NewBytes()
	ids := tok.EncodeText(text)
	row := creditfile.Row{RolloutID: "roll-1", TaskID: "task-a", Tokens: ids, Tokenizer: tokenizer.BytesFingerprint, Reward: 1, HasReward: true}
	for i := range ids {
		row.LossMask = append(row.LossMask, i > 0)
		row.Student = append(row.Student, -0.5)
		row.Teacher = append(row.Teacher, -0.25)
		row.Advantages = append(row.Advantages, 0.25)
	}
	require.NoError(t, creditfile.Write(filepath.Join(dir, name), []creditfile.Row{row}, true))
}

// startPagesServer starts a server whose pages read dir and a history of two points.
func startPagesServer(t *testing.T, dir string) string {
	t.Helper()
	h := status.NewHistory(10)
	st := testStatus()
	st.Training = &hindsightv1.TrainingStats{Step: 3, Loss: 1.5, TrainTokensPerSecond: 900, LossOut: 1, LossDistill: 0.5,
		OutTokens: 640, DistillTokens: 48, GradNormOut: proto.Float64(2), GradNormDistill: proto.Float64(0.75),
		LastStepTook: durationpb.New(3 * time.Second),
		StepInProgress: &hindsightv1.StepInProgress{Step: 4, Phase: "score", Rollouts: 32, Tokens: 640000, RolloutsScored: 12,
			TokensScored: 240000, StartedAt: timestamppb.Now(), Elapsed: durationpb.New(312 * time.Second), Eta: durationpb.New(580 * time.Second)}}
	st.Credit = &hindsightv1.CreditStats{ClipFraction: 0.25, PivotShare: 0.5}
	st.Teacher = &hindsightv1.TeacherStats{MeanLatency: durationpb.New(40 * time.Millisecond), FailuresByKind: map[string]int64{"timeout": 2, "http": 1}}
	st.Gateway = &hindsightv1.GatewayStats{ListenAddr: "127.0.0.1:7078", Model: "hindsight", PolicyStep: 3, Requests: 41, Errors: 2,
		Turns: 39, OpenSessions: 5, RolloutsRecorded: 11, FeedbackJoined: 6, FeedbackLate: 1,
		Ab: &hindsightv1.ABTest{Round: 4, Share: 0.25, Metric: "thumbs_up", Margin: 0.05, Confidence: 0.95, HasDiff: true, Diff: -0.2,
			DiffLow: -0.4, DiffHigh: -0.1, Verdict: "the candidate is worse by more than the margin", Losing: true, Promotions: 1, Rollbacks: 2,
			Arms: []*hindsightv1.ABArm{
				{Role: "default", Step: 3, Sessions: 30, Turns: 60, LatencyMeanSeconds: 0.25, Rated: 20, ThumbsUp: 16, ThumbsFlat: 2, ThumbsDown: 2,
					ThumbsUpRate: 0.8, ThumbsUpLow: 0.58, ThumbsUpHigh: 0.92, Comments: 4, Outcomes: 10, RewardMean: 0.5, RewardLow: 0.25, RewardHigh: 0.75},
				{Role: "candidate", Step: 9, Sessions: 10, Turns: 12, LatencyMeanSeconds: 0.5, Rated: 10, ThumbsUp: 6, ThumbsDown: 4,
					ThumbsUpRate: 0.6, ThumbsUpLow: 0.31, ThumbsUpHigh: 0.83}},
			Decisions: []*hindsightv1.ABDecision{{At: timestamppb.Now(), Action: "promote", By: "rule", DefaultStep: 1, CandidateStep: 3,
				Diff: 0.1, DiffLow: -0.02, DiffHigh: 0.2, Reason: "not worse"}}}}
	st.EngineHooks = []*hindsightv1.EngineHookState{{Kind: "sglang", Url: "http://127.0.0.1:30000", Attempts: 2, LastStep: 3,
		LastCheckpoint: "/ck/step-000003", LastPushedAt: timestamppb.Now(), LastError: ""},
		{Kind: "vllm_lora", Url: "http://127.0.0.1:8000", Attempts: 4, LastError: "503 Service Unavailable"}}
	st.Evals = []*hindsightv1.EvalResult{{Suite: "smoke", Step: 3, Primary: "success", Metrics: map[string]float64{"success": 0.75}}}
	p := status.Sample(st)
	h.Add(p)
	p.At, p.Loss = p.At.Add(time.Second), 1.25
	h.Add(p)
	s, base := statustest.Start(t, func() *hindsightv1.Status { return st }, nil)
	s.SetPages(status.Pages{History: h.Points, CreditDir: dir, Clip: 2,
		Storage: &fsutil.Features{FSType: "nfs", HardLinks: true, Symlinks: true}})
	return base
}

func TestPagesNotServedWithoutSetPages(t *testing.T) {
	_, base := statustest.Start(t, testStatus, nil)
	for _, path := range []string{"/", "/status/history.json", "/viewer/"} {
		code, _, _ := statustest.Get(t, base+path)
		require.Equal(t, http.StatusNotFound, code, path)
	}
}

func TestStatusPage(t *testing.T) {
	base := startPagesServer(t, t.TempDir())
	code, body, h := statustest.Get(t, base+"/")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
	require.Contains(t, h.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, body, `id="charts"`)
	require.Contains(t, body, "/status/history.json")
	require.NotRegexp(t, `(src|href|action)=["']?(https?:)?//`, body, "the page loads nothing from the network")
	require.NotRegexp(t, `fetch\(["'](https?:)?//`, body)

	code, _, _ = statustest.Get(t, base+"/nope")
	require.Equal(t, http.StatusNotFound, code)
}

func TestHistoryJSON(t *testing.T) {
	dir := t.TempDir()
	writeTestCredit(t, dir, "1-a"+creditfile.Suffix, "old")
	old := time.Now().Add(-time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(dir, "1-a"+creditfile.Suffix), old, old))
	writeTestCredit(t, dir, "2-b"+creditfile.Suffix, "new")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644))
	base := startPagesServer(t, dir)

	code, body, h := statustest.Get(t, base+"/status/history.json")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "application/json", h.Get("Content-Type"))
	var doc struct {
		Status  map[string]any          `json:"status"`
		History []status.HistoryPoint   `json:"history"`
		Files   []struct{ Name string } `json:"files"`
		Storage map[string]any          `json:"storage"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, map[string]any{"fs_type": "nfs", "rename_noreplace": false, "hard_links": true, "symlinks": true,
		"rename_mode": "check-then-rename"}, doc.Storage)
	require.Equal(t, "STATE_READY", doc.Status["state"])
	require.Len(t, doc.History, 2)
	p := doc.History[1]
	require.Equal(t, 1.25, p.Loss)
	require.Equal(t, int64(3), p.Step)
	require.Equal(t, 900.0, p.TrainTokensPerSecond)
	require.Equal(t, 0.25, p.ClipFraction)
	require.Equal(t, 0.5, p.PivotShare)
	require.Equal(t, 40.0, p.TeacherLatencyMs)
	require.Equal(t, int64(3), p.TeacherFailures)
	require.Equal(t, map[string]float64{"smoke": 0.75}, p.Evals)
	require.Len(t, doc.Files, 2, "only credit files are listed")
	require.Equal(t, "2-b"+creditfile.Suffix, doc.Files[0].Name, "newest first")
	require.Equal(t, "1-a"+creditfile.Suffix, doc.Files[1].Name)
}

func TestViewerServesCreditFiles(t *testing.T) {
	dir := t.TempDir()
	name := "7-run" + creditfile.Suffix
	writeTestCredit(t, dir, name, "hello credit")
	base := startPagesServer(t, dir)

	code, body, _ := statustest.Get(t, base+"/viewer/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/viewer/`+name+`"`)

	code, body, h := statustest.Get(t, base+"/viewer/"+name)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, body, `id="credit-data"`)
	require.Contains(t, body, "roll-1")
	require.Contains(t, body, `"text":["h","e","l","l","o"`, "tokens decoded with the byte tokenizer")

	code, _, _ = statustest.Get(t, base+"/viewer/missing"+creditfile.Suffix)
	require.Equal(t, http.StatusNotFound, code)
}

func TestViewerRejectsTraversal(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "outputs")
	require.NoError(t, os.Mkdir(dir, 0o755))
	writeTestCredit(t, root, "secret"+creditfile.Suffix, "secret") // outside the credit dir
	require.NoError(t, os.Symlink(filepath.Join(root, "secret"+creditfile.Suffix), filepath.Join(dir, "link"+creditfile.Suffix)))
	base := startPagesServer(t, dir)

	for path, want := range map[string]int{
		"/viewer/..%2Fsecret.credit.arrow":     http.StatusBadRequest,
		"/viewer/%2E%2E%2Fsecret.credit.arrow": http.StatusBadRequest,
		"/viewer/..%5Csecret.credit.arrow":     http.StatusBadRequest,
		"/viewer/.hidden.credit.arrow":         http.StatusBadRequest,
		"/viewer/config.yaml":                  http.StatusBadRequest,
		"/viewer/../secret.credit.arrow":       http.StatusNotFound, // cleaned to /secret.credit.arrow
		"/viewer/link.credit.arrow":            http.StatusNotFound, // a symlink out of the dir
	} {
		code, body, _ := statustest.Get(t, base+path)
		require.Equal(t, want, code, "%s: %s", path, body)
		require.NotContains(t, body, "credit-data", path)
	}
}

func TestHistoryRing(t *testing.T) {
	h := status.NewHistory(3)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		h.Add(status.HistoryPoint{At: at.Add(time.Duration(i) * time.Second), Step: int64(i)})
	}
	steps := func() (out []int64) {
		for _, p := range h.Points() {
			out = append(out, p.Step)
		}
		return out
	}
	require.Equal(t, []int64{2, 3, 4}, steps(), "oldest dropped first")
	h.Add(status.HistoryPoint{At: at.Add(4*time.Second + 100*time.Millisecond), Step: 9})
	require.Equal(t, []int64{2, 3, 9}, steps(), "a point sooner than historyMinGap replaces the newest")
	h.Add(status.HistoryPoint{At: at.Add(6 * time.Second), Step: 10})
	require.Equal(t, []int64{3, 9, 10}, steps())
}
