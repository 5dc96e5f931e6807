package eval

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// Policy is the checkpoint under evaluation as the device suites see it. It is used
// only on the goroutine that owns the device, during Runner.Run.
type Policy struct {
	Step       int64
	Checkpoint string       // the checkpoint directory (an HF model directory)
	Scorer     *xla.Scorer  // the policy's scorer, with the checkpoint's weights
	Sampler    *xla.Sampler // the policy's sampler, with the same weights
	Tokenizer  tokenizer.Tokenizer
}

// DeviceFunc runs one device suite: its metrics, and complete = false when ctx ended
// (the budget) before the suite did.
type DeviceFunc func(ctx context.Context, s SuiteConfig, p Policy) (metrics map[string]float64, complete bool, err error)

// RunnerOptions are what a Runner needs besides its config.
type RunnerOptions struct {
	Log zerolog.Logger
	// ReadOptions check the likelihood suites' rollouts as the spool checks its own.
	ReadOptions rollout.ReadOptions
	// Toolworld runs toolworld suites; nil: RunToolworld.
	Toolworld DeviceFunc
	// OnResult, if set, sees each result after it is recorded (status, metrics).
	OnResult func(Result)
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Runner evaluates checkpoints: device suites in order within a budget, command
// suites as child processes in the background. A failing suite is recorded and logged,
// never returned: evals must not stop training.
type Runner struct {
	cfg  Config
	rec  *Recorder
	opts RunnerOptions
	log  zerolog.Logger

	last time.Time // end of the previous eval (or the start)
	seen int       // checkpoints offered
	bg   context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// NewRunner returns a Runner that records into rec.
func NewRunner(cfg Config, rec *Recorder, opts RunnerOptions) *Runner {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	bg, stop := context.WithCancelCause(context.Background())
	r := &Runner{cfg: cfg, rec: rec, opts: opts, log: opts.Log.With().Str("component", "eval").Logger(), bg: bg,
		stop: func() { stop(ErrStoppedAtShutdown) }}
	r.last = opts.Now()
	return r
}

// Enabled reports whether any suite is configured.
func (r *Runner) Enabled() bool { return len(r.cfg.Suites) > 0 }

// Budget returns how long the device suites of a checkpoint evaluated now may take
// together; 0 means no limit.
func (r *Runner) Budget() time.Duration {
	if r.cfg.Budget == 0 {
		return 0
	}
	b := time.Duration(r.cfg.Budget * float64(r.opts.Now().Sub(r.last)))
	return max(b, r.cfg.MinBudget)
}

// Run evaluates checkpoint p: the device suites now, on the caller's goroutine (the
// device's), within Budget; the command suites are started in the background. It
// returns the device suites' results. ctx ending (shutdown) stops the device suites;
// what they did is recorded as incomplete.
func (r *Runner) Run(ctx context.Context, p Policy) []Result {
	r.seen++
	if !r.Enabled() || (r.seen-1)%r.cfg.EveryCheckpoints != 0 {
		return nil
	}
	budget := r.Budget()
	dctx, cancel := ctx, context.CancelFunc(func() {})
	if budget > 0 {
		dctx, cancel = context.WithTimeout(ctx, budget)
	}
	defer cancel()
	var out []Result
	for _, s := range r.cfg.Suites {
		if s.Kind == KindCommand {
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				t0 := r.opts.Now()
				m, err := runCommand(r.bg, s, p.Step, p.Checkpoint)
				r.record(s, p, t0, m, err == nil, err)
			}()
			continue
		}
		t0 := r.opts.Now()
		var m map[string]float64
		var complete bool
		var err error
		switch s.Kind {
		case KindLikelihood:
			m, complete, err = runLikelihood(dctx, s.File, p.Scorer, r.opts.ReadOptions)
		case KindToolworld:
			run := r.opts.Toolworld
			if run == nil {
				run = RunToolworld
			}
			m, complete, err = run(dctx, s, p)
		}
		out = append(out, r.record(s, p, t0, m, complete, err))
	}
	r.last = r.opts.Now()
	return out
}

func (r *Runner) record(s SuiteConfig, p Policy, t0 time.Time, m map[string]float64, complete bool, err error) Result {
	res := Result{Time: r.opts.Now().UTC(), Step: p.Step, Checkpoint: p.Checkpoint, Suite: s.Name, Kind: s.Kind,
		Metrics: m, Primary: s.PrimaryMetric(), Complete: complete && err == nil, Took: r.opts.Now().Sub(t0).Seconds()}
	ev := r.log.Info()
	if err != nil {
		res.Error = err.Error()
		ev = r.log.Warn().Err(err)
	}
	if rerr := r.rec.Record(res); rerr != nil {
		r.log.Error().Err(rerr).Str("suite", s.Name).Int64("step", p.Step).Msg("record eval result")
	}
	d := zerolog.Dict()
	for k, v := range m {
		d = d.Float64(k, v)
	}
	ev.Str("suite", s.Name).Int64("step", p.Step).Bool("complete", res.Complete).Float64("took_s", res.Took).Dict("metrics", d).Msg("eval")
	if r.opts.OnResult != nil {
		r.opts.OnResult(res)
	}
	return res
}

// ErrStoppedAtShutdown is the error recorded for a command suite that was still running
// when the daemon stopped and Close's grace ran out: the checkpoint was not judged.
var ErrStoppedAtShutdown = errors.New("stopped at shutdown before it finished")

// Close gives running command suites up to grace to finish, then stops them (their
// results are recorded with ErrStoppedAtShutdown) and waits for them.
func (r *Runner) Close(grace time.Duration) {
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		r.log.Warn().Dur("grace", grace).Msg("stopping command evals still running")
		r.stop()
		<-done
	}
	r.stop()
}

// Wait waits for the command suites started so far to finish.
func (r *Runner) Wait() { r.wg.Wait() }
