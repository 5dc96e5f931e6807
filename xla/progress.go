package xla

import (
	"sync"
	"time"
)

// StepPhase is where a Step is.
type StepPhase string

const (
	// PhaseScore: the scoring passes (student, teacher, reference) of each rollout.
	PhaseScore StepPhase = "score"
	// PhaseGradient: the gradient pass of each rollout with a signal.
	PhaseGradient StepPhase = "gradient"
	// PhaseUpdate: AdamW, the teacher's update, and on several devices the copy of
	// the new weights.
	PhaseUpdate StepPhase = "update"
)

// StepProgress is how far the Step in progress is, counted at rollout boundaries
// (a rollout's passes run in chunks on the device and are counted when they end).
type StepProgress struct {
	Step     int64 // the step's number (StepCount after it)
	Phase    StepPhase
	Started  time.Time // when Step was called
	PhaseAt  time.Time // when Phase began
	Rollouts int       // in the batch
	Tokens   int64     // of the batch's rollouts, each counted once
	// RolloutsScored and TokensScored: rollouts whose scoring passes are done.
	RolloutsScored int
	TokensScored   int64
	// RolloutsGradient and TokensGradient: rollouts whose gradient pass is done (or
	// that have none: no signal).
	RolloutsGradient int
	TokensGradient   int64
	// ScoreTook is how long the scoring phase took (set from the gradient phase on).
	ScoreTook time.Duration
}

// ETA estimates how long the step still takes at now: each unfinished phase's
// remaining tokens at that phase's rate, the rate measured in this step where it has
// progress, else the previous step's (prev; zero: none). A gradient phase never
// seen is assumed to take twice its scoring phase (a backward pass costs about two
// forward passes). ok is false before any rate is known.
func (p StepProgress) ETA(now time.Time, prev StepRates) (eta time.Duration, ok bool) {
	scoreRate, gradRate := prev.ScoreTokensPerSecond, prev.GradientTokensPerSecond
	switch p.Phase {
	case PhaseScore:
		if p.TokensScored > 0 {
			scoreRate = float64(p.TokensScored) / now.Sub(p.PhaseAt).Seconds()
		}
	case PhaseGradient:
		if p.TokensGradient > 0 {
			gradRate = float64(p.TokensGradient) / now.Sub(p.PhaseAt).Seconds()
		}
	case PhaseUpdate:
		return 0, true
	}
	if gradRate == 0 && scoreRate > 0 {
		gradRate = scoreRate / 2
	}
	if p.Phase == PhaseGradient && gradRate == 0 && p.ScoreTook > 0 && p.Tokens > 0 {
		gradRate = float64(p.Tokens) / p.ScoreTook.Seconds() / 2
	}
	var s float64
	if p.Phase == PhaseScore {
		if scoreRate <= 0 {
			return 0, false
		}
		s += float64(p.Tokens-p.TokensScored) / scoreRate
	}
	if gradRate <= 0 {
		return 0, false
	}
	s += float64(p.Tokens-p.TokensGradient) / gradRate
	return time.Duration(s * float64(time.Second)), true
}

// StepRates are a finished step's phases' speeds, in tokens per second of the
// batch's rollouts.
type StepRates struct {
	ScoreTokensPerSecond, GradientTokensPerSecond float64
}

// progress is the Trainer's record of the Step in progress. The device goroutine
// (and on several devices each device's) writes it; anyone reads it (Progress).
type progress struct {
	mu     sync.Mutex
	cur    *StepProgress // nil between steps
	last   StepRates
	notify func(StepProgress) // TrainerOptions.OnProgress
}

func (p *progress) update(f func(*StepProgress)) {
	p.mu.Lock()
	if p.cur == nil {
		p.mu.Unlock()
		return
	}
	f(p.cur)
	snap := *p.cur
	notify := p.notify
	p.mu.Unlock()
	if notify != nil {
		notify(snap)
	}
}

func (p *progress) begin(step int64, rollouts int, tokens int64) {
	now := time.Now()
	p.mu.Lock()
	p.cur = &StepProgress{Step: step, Phase: PhaseScore, Started: now, PhaseAt: now, Rollouts: rollouts, Tokens: tokens}
	snap, notify := *p.cur, p.notify
	p.mu.Unlock()
	if notify != nil {
		notify(snap)
	}
}

func (p *progress) scored(tokens int) {
	p.update(func(s *StepProgress) { s.RolloutsScored++; s.TokensScored += int64(tokens) })
}

func (p *progress) gradientDone(tokens int) {
	p.update(func(s *StepProgress) { s.RolloutsGradient++; s.TokensGradient += int64(tokens) })
}

func (p *progress) phase(ph StepPhase) {
	p.update(func(s *StepProgress) {
		now := time.Now()
		if ph == PhaseGradient {
			s.ScoreTook = now.Sub(s.Started)
		}
		s.Phase, s.PhaseAt = ph, now
	})
}

// end clears the step in progress; a step that succeeded leaves its rates for the
// next one's ETA.
func (p *progress) end(ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cur; ok && c != nil && c.Tokens > 0 {
		p.last.ScoreTokensPerSecond = rate(c.Tokens, c.ScoreTook)
		if c.Phase == PhaseUpdate {
			p.last.GradientTokensPerSecond = rate(c.Tokens, c.PhaseAt.Sub(c.Started)-c.ScoreTook)
		}
	}
	p.cur = nil
}

func rate(tokens int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(tokens) / d.Seconds()
}

// Progress returns the Step in progress (ok false between steps) and the last
// finished step's rates, for its ETA. Safe from any goroutine.
func (tr *Trainer) Progress() (p StepProgress, prev StepRates, ok bool) {
	tr.progress.mu.Lock()
	defer tr.progress.mu.Unlock()
	if tr.progress.cur == nil {
		return StepProgress{}, tr.progress.last, false
	}
	return *tr.progress.cur, tr.progress.last, true
}
