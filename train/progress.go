package train

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/xla"
)

// progressEvery is how often a long phase of a step logs where it is.
const progressEvery = 30 * time.Second

// Progress returns the step on the device now (ok false between steps) and the last
// finished step's rates, for its ETA. Safe from any goroutine.
func (lp *Loop) Progress() (p xla.StepProgress, prev xla.StepRates, ok bool) {
	return lp.tr.Progress()
}

// progressLog logs a step's progress: a line when it starts, one at each phase
// change, and one at a rollout boundary when progressEvery has passed since the
// last, so a step of many minutes is visible in the log (docs/running.md "A step in
// progress"). It is the trainer's OnProgress.
type progressLog struct {
	log  zerolog.Logger
	tr   *xla.Trainer // for the last step's rates (set once the trainer exists)
	mu   sync.Mutex
	last xla.StepProgress
	at   time.Time
}

func (pl *progressLog) observe(p xla.StepProgress) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now := time.Now()
	var msg string
	switch {
	case p.Step != pl.last.Step:
		msg = "step started: scoring"
	case p.Phase != pl.last.Phase && p.Phase == xla.PhaseGradient:
		msg = "step scored: gradient passes"
	case p.Phase != pl.last.Phase && p.Phase == xla.PhaseUpdate:
		msg = "step gradients done: updating the weights"
	case now.Sub(pl.at) >= progressEvery:
		msg = "step in progress"
	default:
		pl.last = p
		return
	}
	pl.last, pl.at = p, now
	ev := pl.log.Info().Int64("step", p.Step).Str("phase", string(p.Phase)).Int("rollouts", p.Rollouts).Int64("tokens", p.Tokens).
		Int("rollouts_scored", p.RolloutsScored).Int64("tokens_scored", p.TokensScored).
		Int("rollouts_gradient", p.RolloutsGradient).Int64("tokens_gradient", p.TokensGradient).
		Float64("elapsed_s", now.Sub(p.Started).Seconds())
	if pl.tr != nil {
		_, prev, _ := pl.tr.Progress()
		if eta, ok := p.ETA(now, prev); ok {
			ev = ev.Float64("eta_s", eta.Seconds())
		}
	}
	ev.Msg(msg)
}
