package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/train"
	"github.com/hindsight-ai/hindsight/xla"
)

// Options are the parts of a run that are not configuration.
type Options struct {
	Version string         // code version reported in status and metrics
	Log     zerolog.Logger // the process logger; Run adds component fields
	// Drain processes everything waiting in the spool (what Events.Ready leaves in
	// incoming/ included), trains it, and returns instead of watching and serving
	// (hindsightd -demo).
	Drain bool
	// Events, when set, is told about the run's progress.
	Events Events
	// Backend is the -backend flag (overrides the config's backend:).
	Backend string
	// ResumeFrom restores the checkpoint of this step instead of the newest; < 0: newest.
	ResumeFrom int64
	// ConfigPath is the config file, re-read on a Reload signal; Reload delivers
	// SIGHUP: the teacher settings are reloaded without a restart.
	ConfigPath string
	Reload     <-chan os.Signal
}

// Events is told about a run's progress (hindsightd -demo prints it). Calls come
// from the pipeline's goroutines and must not block for long.
type Events interface {
	// Ready: the spool is open and the policy loaded; nothing is claimed yet. An
	// error stops the run before it claims anything.
	Ready(st *hindsightv1.Status) error
	// FileDecided: a claimed file's rows are decided; training says its accepted
	// rollouts go on to the trainer (else the file is finished or quarantined).
	FileDecided(rep *rollout.FileReport, training bool)
	// Stepped: an optimizer step; stepped counts the tokens of the rollouts stepped in
	// this process.
	Stepped(met xla.Metrics, stepped int64)
	// FileTrained: a file left processing/ after training.
	FileTrained(rep *rollout.FileReport, rows int, creditFile string)
	// Stopped: the run is over; st is its last status.
	Stopped(st *hindsightv1.Status)
}

// daemon is one run of hindsightd: the stages and what they share. The ingest loop
// claims and decides spool files; the device goroutine (train.Loop) is the only one
// that drives the trainer and the ledger, and it also finishes wholly trained files
// in the spool (d.finish, called by the ledger right after the file's credit file is
// published). Finishing is not handed back to the ingest loop over a channel: ingest
// spends most of its time blocked handing the next decided file to the pipeline, so a
// finish queued behind it would wait for the device, and keeping it in the ledger's
// step keeps "credit file published, then file finished" one ordered sequence that a
// crash replays. Spool.Finish touches only its own claim's file and the journal
// serialises updates with its mutex, so the two goroutines never race. Everything
// else reads published snapshots.
type daemon struct {
	gateway *gateway.Gateway // nil unless gateway.enabled
	// late holds feedback on gateway sessions already written, which feed joins
	// to their rollouts (the gateway adds to it).
	late *gateway.LateFeedback
	// hooks tell serving engines about new checkpoints (nil without engine_hooks
	// or training).
	hooks   *checkpoint.Hooks
	cfg     Config
	opts    Options
	log     zerolog.Logger
	spool   *rollout.Spool
	stats   *stats
	metrics *metrics
	reg     *prometheus.Registry
	notify  *notifier
	events  Events
	started time.Time
	pauser  *pauser
	wake    chan struct{}   // a file may have landed in incoming/
	storage fsutil.Features // what the data directory's file system offers
	// backend is the compute backend the trainer and the gateway share, resolved
	// by backendChoice on first use.
	backend     xla.Choice
	backendOnce sync.Once
	// madeModel is the default model directory this run created ("" if none).
	madeModel string

	// Training (nil while train.enabled is false).
	readOpts  rollout.ReadOptions
	hinter    atomic.Pointer[teacher.Hinter]
	tokenizer tokenizer.Tokenizer
	eval      *evaluator // nil without eval suites
	q         *queues
	ledger    *ledger.Ledger
	loop      *train.Loop
	ingesting atomic.Bool
	beat      atomic.Int64 // unix nanos of the device loop's last progress
	// workDeadline is when the work context ends after a stop (unix nanos; 0 before
	// one): what closing may still wait for waits no longer.
	workDeadline atomic.Int64
}

// training reports whether this run trains.
func (d *daemon) training() bool { return d.cfg.Train.Enabled }

// heartbeat records device-loop progress for the systemd watchdog.
func (d *daemon) heartbeat() { d.beat.Store(time.Now().UnixNano()) }

// Run runs hindsightd until ctx is cancelled (SIGTERM/SIGINT), then drains: it
// finishes the file in hand within cfg.ShutdownTimeout, stops the servers and returns
// nil. Errors that make the spool untrustworthy (journal, disk, lock) are returned.
// With opts.Drain it returns once the spool is empty instead.
func Run(ctx context.Context, cfg Config, opts Options) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	d := &daemon{cfg: cfg, opts: opts, log: opts.Log.With().Str("component", "daemon").Logger(),
		events: opts.Events, started: time.Now(), pauser: newPauser(), wake: make(chan struct{}, 1)}
	if d.events == nil {
		d.events = noEvents{}
	}
	d.notify = newNotifier(d.log)
	if err := fsutil.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer lock.release()
	// A start that fails (a backend that does not load, a port in use) takes back
	// the default model it created, so the next start makes it afresh from the
	// config it then has.
	started := false
	defer func() {
		if !started {
			d.undoStart()
		}
	}()
	if d.storage, err = probeStorage(cfg.DataDir, opts.Log.With().Str("component", "storage").Logger()); err != nil {
		return err
	}
	if err := removeTemps(cfg, opts.Log.With().Str("component", "storage").Logger()); err != nil {
		return err
	}
	err = xla.ConfigureProgramCache(xla.ProgramCache{Dir: cfg.CompileCacheDir(), MaxBytes: cfg.CompileCache.MaxBytes,
		NoWarm: !cfg.CompileCache.Warm, Log: opts.Log.With().Str("component", "compile").Logger()})
	if err != nil {
		return err
	}
	closeAll, err := d.open()
	defer closeAll()
	if err != nil {
		return err
	}
	if opts.Drain {
		started = true
		return d.drain(ctx)
	}
	err = d.serve(ctx)
	started = d.stats.everReady()
	return err
}

// undoStart removes what a failed start created: the default model directory, if
// this run made it.
func (d *daemon) undoStart() {
	if d.madeModel == "" {
		return
	}
	if err := os.RemoveAll(d.madeModel); err != nil {
		d.log.Warn().Err(err).Str("model_dir", d.madeModel).Msg("start failed; could not remove the model it created")
		return
	}
	d.log.Info().Str("model_dir", d.madeModel).Msg("start failed; removed the model it created")
}

// open opens what the stages share, in order: the model (training), the spool, the
// status, the teacher, the ledger and the policy. close undoes what succeeded.
func (d *daemon) open() (close func(), err error) {
	var closers []func()
	close = func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if d.training() {
		if err := d.ensureModel(); err != nil {
			return close, err
		}
	}
	if d.readOpts, err = d.readOptions(); err != nil {
		return close, err
	}
	d.spool, err = rollout.OpenSpool(d.cfg.SpoolDir(), d.cfg.JournalPath(), d.readOpts, d.opts.Log)
	if err != nil {
		return close, err
	}
	closers = append(closers, func() {
		if err := d.spool.Close(); err != nil {
			d.log.Error().Err(err).Msg("close journal")
		}
	})
	d.logCompaction()
	if d.late, err = gateway.OpenLateFeedback(filepath.Join(d.cfg.DataDir, "state", "feedback")); err != nil {
		return close, err
	}

	d.reg = prometheus.NewRegistry()
	d.stats = newStats(d.opts.Version, d.cfg.DataDir, d.storage, d.started, d.spool, d.pauser.proto)
	d.metrics = newMetrics(d.reg, d.stats, d.opts.Version, []string{d.cfg.DataDir, d.cfg.SpoolDir(), d.cfg.OutputPath()})
	d.reg.MustRegister(storageGauge(d.storage))
	d.pauser.onChange = d.stats.publish
	d.stats.publish()
	if !d.training() {
		return close, nil
	}
	if err := d.openTraining(); err != nil {
		return close, err
	}
	closers = append(closers, func() { d.ledger.Close() })
	closeEvals, err := d.openEvals()
	if err != nil {
		return close, err
	}
	closers = append(closers, closeEvals)
	d.stats.publish()
	return close, nil
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
	} else if err := tokenizer.CheckFingerprint("validation.tokenizer", o.Tokenizer, fp); err != nil {
		return o, fmt.Errorf("config: %w", err)
	}
	if o.VocabSize == 0 {
		o.VocabSize = md.Config.VocabSize
	}
	d.log.Info().Str("model_dir", dir).Str("tokenizer", fp).Int("vocab_size", o.VocabSize).Msg("model")
	return o, nil
}

// noEvents is the Events of a run without a listener.
type noEvents struct{}

func (noEvents) Ready(*hindsightv1.Status) error              { return nil }
func (noEvents) FileDecided(*rollout.FileReport, bool)        {}
func (noEvents) Stepped(xla.Metrics, int64)                   {}
func (noEvents) FileTrained(*rollout.FileReport, int, string) {}
func (noEvents) Stopped(*hindsightv1.Status)                  {}
