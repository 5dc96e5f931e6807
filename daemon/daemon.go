package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// Options are the parts of a run that are not configuration.
type Options struct {
	Version string         // code version reported in status and metrics
	Log     zerolog.Logger // the process logger; Run adds component fields
	// Demo synthesizes a few rollouts into the spool, processes everything waiting,
	// prints progress and a summary to Out, and returns instead of watching.
	Demo bool
	Out  io.Writer // human progress for -demo; nil discards it
	// Backend is the -backend flag (overrides the config's backend:).
	Backend string
	// ResumeFrom restores the checkpoint of this step instead of the newest; < 0: newest.
	ResumeFrom int64
	// ConfigPath is the config file, re-read on a Reload signal; Reload delivers
	// SIGHUP: the teacher settings are reloaded without a restart.
	ConfigPath string
	Reload     <-chan os.Signal
}

// daemon is one run of hindsightd. The ingest loop is the only goroutine that drives
// the spool; everything else reads published snapshots.
type daemon struct {
	cfg     Config
	opts    Options
	log     zerolog.Logger
	spool   *rollout.Spool
	stats   *stats
	metrics *metrics
	notify  *notifier
	out     io.Writer
	started time.Time
	pauser  *pauser

	// Training (nil while train.enabled is false).
	readOpts  rollout.ReadOptions
	hinter    atomic.Pointer[teacher.Hinter]
	tokenizer data.Tokenizer
	q         *queues
	dev       *device
	ingesting atomic.Bool
	feeding   atomic.Bool
	beat      atomic.Int64 // unix nanos of the device loop's last progress
	doneIDs   map[string]bool
	pipeDone  <-chan struct{}
	// onStep, when set (-demo), is told about each step: stepped counts the tokens of
	// the rollouts stepped so far in this process.
	onStep        func(met xla.Metrics, stepped int64)
	steppedTokens int64
}

// training reports whether this run trains.
func (d *daemon) training() bool { return d.cfg.Train.Enabled }

// heartbeat records device-loop progress for the systemd watchdog.
func (d *daemon) heartbeat() { d.beat.Store(time.Now().UnixNano()) }

// Run runs hindsightd until ctx is cancelled (SIGTERM/SIGINT), then drains: it
// finishes the file in hand within cfg.ShutdownTimeout, stops the servers and returns
// nil. Errors that make the spool untrustworthy (journal, disk, lock) are returned.
func Run(ctx context.Context, cfg Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	d := &daemon{cfg: cfg, opts: opts, log: opts.Log.With().Str("component", "daemon").Logger(),
		out: opts.Out, started: time.Now(), pauser: newPauser()}
	if d.out == nil {
		d.out = io.Discard
	}
	d.notify = newNotifier(d.log)

	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.release()

	if d.training() {
		if err := d.ensureModel(); err != nil {
			return err
		}
	}
	readOpts, err := d.readOptions()
	if err != nil {
		return err
	}
	d.readOpts = readOpts
	d.spool, err = rollout.OpenSpool(cfg.SpoolDir(), cfg.JournalPath(), readOpts, opts.Log)
	if err != nil {
		return err
	}
	defer func() {
		if err := d.spool.Close(); err != nil {
			d.log.Error().Err(err).Msg("close journal")
		}
	}()
	d.logCompaction()

	reg := prometheus.NewRegistry()
	d.stats = newStats(d, opts.Version)
	d.metrics = newMetrics(reg, d.stats, opts.Version)
	d.pauser.onChange = d.stats.publish
	d.stats.publish()

	if d.training() {
		if err := d.openTraining(); err != nil {
			return err
		}
		defer d.dev.close()
		d.stats.publish()
	}

	if opts.Demo {
		return d.runDemo(ctx)
	}

	srv := NewServer(cfg.Listen, d.stats.snapshot, reg, opts.Log)
	srv.SetServing(false) // not ready until the spool is recovered
	srv.SetController(d)
	if err := srv.Start(); err != nil {
		return err
	}
	d.stats.listenAddr = srv.Addr()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			d.log.Warn().Err(err).Msg("stop status server")
		}
	}()

	work, stopWork := d.workContext(ctx)
	defer stopWork()
	if !d.training() {
		if err := d.recover(ctx, work); err != nil {
			return err
		}
	}

	d.stats.setState(stateReady)
	srv.SetServing(true)
	d.notify.ready(d.stats.line())
	d.log.Info().Str("listen", srv.Addr()).Str("data_dir", cfg.DataDir).Str("version", opts.Version).Msg("ready")

	g, gctx := errgroup.WithContext(ctx)
	wake := make(chan struct{}, 1)
	g.Go(func() error { return d.watch(gctx, wake) })
	g.Go(func() error { return d.publishLoop(gctx) })
	g.Go(func() error { d.notify.watchdog(gctx, d.watchdogAlive); return nil })
	ingest := func(ictx context.Context) error {
		if d.training() {
			if err := d.recover(ictx, work); err != nil {
				return err
			}
		}
		return d.ingestLoop(ictx, work, wake)
	}
	if d.training() {
		g.Go(func() error { d.reloadLoop(gctx); return nil })
		d.startPipeline(g, gctx, work)
		g.Go(func() error {
			defer close(d.q.files)
			err := ingest(gctx)
			if err != nil {
				d.stats.setError(err, "")
			}
			return err
		})
	} else {
		g.Go(func() error {
			err := ingest(ctx)
			if err != nil {
				d.stats.setError(err, "")
			}
			return err
		})
	}

	<-gctx.Done()
	d.stats.setState(stateDraining)
	srv.SetServing(false)
	d.notify.stopping()
	d.log.Info().Msg("draining")
	err = g.Wait()
	d.stats.publish()
	if err != nil {
		d.log.Error().Err(err).Msg("pipeline stopped")
		return err
	}
	t := d.spool.Journal().Totals()
	d.log.Info().Int64("rollouts_accepted", t.RolloutsAccepted).Int64("rollouts_rejected", t.RolloutsRejected).
		Dur("uptime", time.Since(d.started)).Msg("stopped")
	return nil
}

// Pause is ControlService.Pause: no new claims, no new steps (the step in hand
// finishes) until Resume. Readiness does not change.
func (d *daemon) Pause(by, reason string) *hindsightv1.PauseState {
	st := d.pauser.pause(by, reason)
	d.log.Info().Str("by", by).Str("reason", reason).Msg("paused: no new claims or steps until resume")
	return st
}

// Resume is ControlService.Resume: it ends an operator's pause (a full disk still
// pauses until a retried write succeeds).
func (d *daemon) Resume(by string) *hindsightv1.PauseState {
	was, st := d.pauser.resume()
	if was {
		d.log.Info().Str("by", by).Bool("disk_full", st.GetDiskFull()).Msg("resumed")
	}
	return st
}

// workContext returns the context file processing runs under: it outlives ctx by
// cfg.ShutdownTimeout, so a drain finishes the file in hand instead of abandoning it
// (abandoning is safe too: the file is resumed on the next start).
func (d *daemon) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var once sync.Once
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(d.cfg.ShutdownTimeout, func() {
			d.log.Warn().Dur("shutdown_timeout", d.cfg.ShutdownTimeout).Msg("drain took too long; abandoning the file in hand (it resumes on restart)")
			cancel()
		})
		context.AfterFunc(work, func() { t.Stop() })
	})
	return work, func() { once.Do(func() { stop(); cancel() }) }
}

// recover finishes what a crash left in processing/, in claim order.
// It stops early, leaving the rest for the next start, when ctx ends.
func (d *daemon) recover(ctx, work context.Context) error {
	d.ingesting.Store(true)
	defer d.ingesting.Store(false)
	todo, err := d.spool.Recover()
	if err != nil {
		return err
	}
	if len(todo) > 0 {
		d.log.Info().Int("files", len(todo)).Msg("resuming files left in processing/")
	}
	for _, c := range todo {
		if ctx.Err() != nil {
			return nil
		}
		if err := d.processClaim(work, c); err != nil {
			if errors.Is(err, errStopped) {
				return nil
			}
			return err
		}
	}
	return nil
}

// errStopped reports that processing stopped because the work context ended.
var errStopped = errors.New("stopped")

// readOptions is what validation checks: the configured tokenizer fingerprint and
// vocab size, else the model directory's.
func (d *daemon) readOptions() (rollout.ReadOptions, error) {
	o := rollout.ReadOptions{VocabSize: d.cfg.Valid.VocabSize, Tokenizer: d.cfg.Valid.Tokenizer}
	dir, _ := d.cfg.ModelDir()
	if d.cfg.Model.Dir == "" && !d.training() {
		return o, nil
	}
	md, err := data.OpenModelDir(dir)
	if err != nil {
		return o, fmt.Errorf("model.dir: %w", err)
	}
	defer md.Close()
	d.tokenizer = md.Tokenizer
	fp := md.Tokenizer.Fingerprint()
	if o.Tokenizer == "" {
		o.Tokenizer = fp
	} else if err := data.CheckFingerprint("validation.tokenizer", o.Tokenizer, fp); err != nil {
		return o, fmt.Errorf("config: %w", err)
	}
	if o.VocabSize == 0 {
		o.VocabSize = md.Config.VocabSize
	}
	d.log.Info().Str("model_dir", dir).Str("tokenizer", fp).Int("vocab_size", o.VocabSize).Msg("model")
	return o, nil
}
