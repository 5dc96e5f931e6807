package xla

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStepProgress: a step reports where it is at every rollout boundary: the
// scoring passes rollout by rollout, then the gradient passes, then the update, with
// the batch's totals throughout; Progress is empty between steps, and a finished
// step leaves its rates for the next step's ETA (issue 39 item 3). On two devices
// (XLA CPU) every rollout is counted once in each phase as well.
func TestStepProgress(t *testing.T) {
	check := func(t *testing.T, tr *Trainer, got *[]StepProgress, mu *sync.Mutex) {
		pool := rolloutPool(3, 5)
		var total int64
		for _, r := range pool {
			total += int64(len(r.Tokens))
		}
		_, _, ok := tr.Progress()
		require.False(t, ok, "no step in progress before the first")
		_, err := tr.Step(t.Context(), pool)
		require.NoError(t, err)
		_, prev, ok := tr.Progress()
		require.False(t, ok, "no step in progress after it")
		require.Greater(t, prev.ScoreTokensPerSecond, 0.0)
		require.Greater(t, prev.GradientTokensPerSecond, 0.0)

		mu.Lock()
		defer mu.Unlock()
		ps := *got
		require.Len(t, ps, 1+3+1+3+1, "start, 3 scored, gradient phase, 3 gradients, update phase")
		for _, p := range ps {
			require.EqualValues(t, 1, p.Step)
			require.Equal(t, 3, p.Rollouts)
			require.Equal(t, total, p.Tokens)
		}
		require.Equal(t, PhaseScore, ps[0].Phase)
		require.Zero(t, ps[0].RolloutsScored)
		require.Equal(t, PhaseScore, ps[3].Phase)
		require.Equal(t, 3, ps[3].RolloutsScored)
		require.Equal(t, total, ps[3].TokensScored)
		require.Equal(t, PhaseGradient, ps[4].Phase)
		require.Positive(t, ps[4].ScoreTook)
		require.Zero(t, ps[4].RolloutsGradient)
		require.Equal(t, 3, ps[7].RolloutsGradient)
		require.Equal(t, total, ps[7].TokensGradient)
		require.Equal(t, PhaseUpdate, ps[8].Phase)
		for i := 1; i < len(ps); i++ {
			require.GreaterOrEqual(t, ps[i].RolloutsScored, ps[i-1].RolloutsScored)
			require.GreaterOrEqual(t, ps[i].RolloutsGradient, ps[i-1].RolloutsGradient)
		}
	}
	run := func(t *testing.T, devices int) {
		var b = newTestBackend(t)
		if devices > 1 {
			b = newTwoDevices(t)
		}
		m, err := Open(tinyModelDir(t), OpenOptions{})
		require.NoError(t, err)
		var mu sync.Mutex
		var got []StepProgress
		opts := resumeOptions(nil)
		opts.Credit.KLBeta = 0
		opts.Devices = devices
		opts.OnProgress = func(p StepProgress) { mu.Lock(); got = append(got, p); mu.Unlock() }
		tr, err := NewTrainer(b, m, opts)
		require.NoError(t, err)
		check(t, tr, &got, &mu)
	}
	t.Run("one device", func(t *testing.T) { run(t, 1) })
	t.Run("two devices", func(t *testing.T) { run(t, 2) })
}

// TestStepProgressETA: the estimate uses this step's rate where the phase has made
// progress, the previous step's otherwise, and assumes a gradient phase twice as long
// as scoring when nothing else is known.
func TestStepProgressETA(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	p := StepProgress{Phase: PhaseScore, Started: t0, PhaseAt: t0, Rollouts: 4, Tokens: 1000}
	_, ok := p.ETA(t0.Add(time.Second), StepRates{})
	require.False(t, ok, "nothing measured yet")
	eta, ok := p.ETA(t0.Add(time.Second), StepRates{ScoreTokensPerSecond: 100, GradientTokensPerSecond: 50})
	require.True(t, ok)
	require.Equal(t, 30*time.Second, eta, "1000/100 + 1000/50 from the previous step")

	p.RolloutsScored, p.TokensScored = 1, 250
	eta, _ = p.ETA(t0.Add(10*time.Second), StepRates{})
	require.Equal(t, 30*time.Second+80*time.Second, eta, "750 at 25/s, then 1000 at 12.5/s")

	p = StepProgress{Phase: PhaseGradient, Started: t0, PhaseAt: t0.Add(40 * time.Second), Rollouts: 4, Tokens: 1000,
		RolloutsScored: 4, TokensScored: 1000, RolloutsGradient: 2, TokensGradient: 500, ScoreTook: 40 * time.Second}
	eta, _ = p.ETA(t0.Add(90*time.Second), StepRates{})
	require.Equal(t, 50*time.Second, eta, "500 left at 10/s")
	p.TokensGradient, p.RolloutsGradient = 0, 0
	eta, _ = p.ETA(t0.Add(40*time.Second), StepRates{})
	require.Equal(t, 80*time.Second, eta, "twice the scoring phase")
}
