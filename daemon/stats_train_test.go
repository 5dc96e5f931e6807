package daemon

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestStepLossTerms: a step's two loss terms, their token counts and (with
// train.term_grad_norms) their gradient norms reach the status's TrainingStats, the
// Prometheus series and the status page's history; without the norms (NaN from the
// trainer) the norm fields and series are absent, not NaN.
func TestStepLossTerms(t *testing.T) {
	dir := t.TempDir()
	sp, err := rollout.OpenSpool(filepath.Join(dir, "spool"), filepath.Join(dir, "journal"), rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	s := newStats("test", dir, fsutil.Features{}, time.Now(), sp, func() *hindsightv1.PauseState { return nil })
	s.setBackend("go", "cpu", 10, dir, "go from -backend")
	reg := prometheus.NewRegistry()
	newMetrics(reg, s, "test", nil)
	s.publish()
	require.Empty(t, termSeries(t, reg), "no term series before the first step")

	m := xla.Metrics{Step: 3, Updated: true, Loss: 0.75, Terms: credit.Terms{Out: 0.5, Distill: 0.25},
		Credit: credit.Stats{OutTokens: 1200, DistillTokens: 96}, OutGradNorm: 1.5, DistillGradNorm: 0.125,
		Rollouts: 2, Took: time.Second}
	s.stepDone(m, 100, time.Second)
	tr := s.snapshot().GetTraining()
	require.Equal(t, 0.5, tr.GetLossOut())
	require.Equal(t, 0.25, tr.GetLossDistill())
	require.EqualValues(t, 1200, tr.GetOutTokens())
	require.EqualValues(t, 96, tr.GetDistillTokens())
	require.Equal(t, 1.5, tr.GetGradNormOut())
	require.Equal(t, 0.125, tr.GetGradNormDistill())
	require.Equal(t, map[string]float64{
		`hindsight_train_term_loss{term="out"}`: 0.5, `hindsight_train_term_loss{term="distill"}`: 0.25,
		`hindsight_train_term_tokens{term="out"}`: 1200, `hindsight_train_term_tokens{term="distill"}`: 96,
		`hindsight_train_term_grad_norm{term="out"}`: 1.5, `hindsight_train_term_grad_norm{term="distill"}`: 0.125,
	}, termSeries(t, reg))
	pts := s.hist.Points()
	last := pts[len(pts)-1]
	require.Equal(t, 0.5, last.LossOut)
	require.Equal(t, 0.125, *last.GradNormDistill)

	m.OutGradNorm, m.DistillGradNorm, m.Terms.Distill = math.NaN(), math.NaN(), 0.375
	s.stepDone(m, 100, time.Second)
	tr = s.snapshot().GetTraining()
	require.Nil(t, tr.GradNormOut, "no norms without train.term_grad_norms")
	require.Nil(t, tr.GradNormDistill)
	require.Equal(t, 0.375, tr.GetLossDistill())
	series := termSeries(t, reg)
	require.Len(t, series, 4, "loss and tokens, no gradient norms")
	require.Equal(t, 0.375, series[`hindsight_train_term_loss{term="distill"}`])
	pts = s.hist.Points()
	require.Nil(t, pts[len(pts)-1].GradNormOut)
}

// termSeries gathers reg and returns the hindsight_train_term_* gauges as
// `name{term="…"}` → value.
func termSeries(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "hindsight_train_term_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			require.Len(t, m.GetLabel(), 1)
			out[fmt.Sprintf("%s{%s=%q}", mf.GetName(), m.GetLabel()[0].GetName(), m.GetLabel()[0].GetValue())] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestStatusStepInProgress: while a step runs on the device the status carries it
// (phase, rollouts and tokens done of the batch, start, elapsed, ETA), and nothing
// between steps (issue 39 item 3).
func TestStatusStepInProgress(t *testing.T) {
	dir := t.TempDir()
	sp, err := rollout.OpenSpool(filepath.Join(dir, "spool"), filepath.Join(dir, "journal"), rollout.ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { _ = sp.Close() })
	s := newStats("test", dir, fsutil.Features{}, time.Now(), sp, func() *hindsightv1.PauseState { return nil })
	s.setBackend("go", "cpu", 10, dir, "")
	var cur *xla.StepProgress
	s.setProgress(func() (xla.StepProgress, xla.StepRates, bool) {
		if cur == nil {
			return xla.StepProgress{}, xla.StepRates{}, false
		}
		return *cur, xla.StepRates{}, true
	})
	s.publish()
	require.Nil(t, s.snapshot().GetTraining().GetStepInProgress(), "between steps")

	started := time.Now().Add(-100 * time.Second)
	cur = &xla.StepProgress{Step: 1, Phase: xla.PhaseScore, Started: started, PhaseAt: started, Rollouts: 32, Tokens: 64000,
		RolloutsScored: 8, TokensScored: 16000}
	s.publish()
	got := s.snapshot().GetTraining().GetStepInProgress()
	require.NotNil(t, got)
	require.EqualValues(t, 1, got.GetStep())
	require.Equal(t, "score", got.GetPhase())
	require.EqualValues(t, 32, got.GetRollouts())
	require.EqualValues(t, 64000, got.GetTokens())
	require.EqualValues(t, 8, got.GetRolloutsScored())
	require.EqualValues(t, 16000, got.GetTokensScored())
	require.Zero(t, got.GetRolloutsGradient())
	require.True(t, got.GetStartedAt().AsTime().Equal(started))
	require.GreaterOrEqual(t, got.GetElapsed().AsDuration(), 100*time.Second)
	// 48,000 tokens left to score at 160/s, then 64,000 gradient tokens at half that.
	require.InDelta(t, (300 + 800), got.GetEta().AsDuration().Seconds(), 20)
}
