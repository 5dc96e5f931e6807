package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/train"
)

// ensureModel creates the default model directory (<data_dir>/model) on first start.
// A configured model.dir must exist: it is never created.
func (d *daemon) ensureModel() error {
	dir, isDefault := d.cfg.ModelDir()
	if !isDefault {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, data.ConfigFileName)); err == nil {
		return nil
	}
	mc, err := data.InitModel(dir, data.InitOptions{Preset: d.cfg.Model.InitPreset, Tokenizer: d.cfg.Model.InitTokenizer})
	if err != nil {
		return fmt.Errorf("create default model: %w", err)
	}
	d.madeModel = dir
	d.log.Info().Str("model_dir", dir).Str("preset", d.cfg.Model.InitPreset).Int("vocab_size", mc.VocabSize).
		Msg("created the default model")
	return nil
}

// openTraining opens the teacher, the ledger (which cleans the staging folders of
// finished files) and the policy.
func (d *daemon) openTraining() error {
	h, err := d.newHinter(d.cfg.Teacher)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	d.hinter.Store(h)
	d.stats.teacher = func() *teacher.Stats { return d.hinter.Load().Stats() }
	d.ledger, err = ledger.Open(ledger.Options{
		SkipLog:    filepath.Join(d.cfg.DataDir, "state", "skipped.txt"),
		StagingDir: d.cfg.StagingDir(),
		OutputDir:  d.cfg.OutputPath(),
		Unfinished: d.spool.Journal().Unfinished(),
		Retry:      d.retryDiskFull,
		Finish:     d.finish,
		Log:        d.opts.Log,
	})
	if err != nil {
		return err
	}
	modelDir, _ := d.cfg.ModelDir()
	cfgYAML, _ := d.cfg.YAML()
	d.loop, err = train.Open(train.Options{
		Config: d.cfg.Train, Credit: d.cfg.Credit, Backend: d.backendChoice().Spec,
		ModelDir: modelDir, Precision: d.cfg.Model.Precision, Tokenizer: d.tokenizer, CheckpointDir: d.cfg.CheckpointDir(), ResumeFrom: d.opts.ResumeFrom,
		Version: d.opts.Version, ConfigYAML: cfgYAML,
		Ledger: d.ledger, Retry: d.retryDiskFull, Pause: d.pauser,
		Busy:            func() bool { return d.ingesting.Load() || d.q.busy() },
		AfterCheckpoint: d.evalCheckpoint,
		// The teacher of the moment (a SIGHUP may have replaced it) picks each step's
		// sibling contexts (teacher.context sources: sibling).
		Siblings: func(step []teacher.StepRollout) [][]teacher.Hint { return d.hinter.Load().Siblings(step) },
		Log:      d.opts.Log,
	})
	if err != nil {
		d.ledger.Close()
		return err
	}
	info := d.loop.Info()
	if info.Checkpoint != "" {
		d.stats.setCheckpoint(info.Step, info.Checkpoint, info.CheckpointAt)
	}
	d.stats.setBackend(info.BackendName, info.Device, info.Parameters, info.ModelDir, d.backendChoice().Reason)
	d.stats.setCompileCache(d.cfg.CompileCacheDir())
	d.stats.setProgress(d.loop.Progress)
	d.stats.trainedTotal(info.Trained, info.Step, info.Updates, d.cfg.Train.TokenBudget)
	d.q = newQueues(d.cfg.Train.TeacherConcurrency)
	return nil
}

// newHinter builds the teacher from cfg, caching LLM hints under the data directory.
func (d *daemon) newHinter(cfg teacher.Config) (*teacher.Hinter, error) {
	if cfg.CacheDir == "" {
		cfg.CacheDir = d.cfg.TeacherCacheDir()
	}
	cfg.Template = cfg.Template.For(d.tokenizer) // the default preset follows the policy's chat format
	var st *teacher.Stats
	if old := d.hinter.Load(); old != nil {
		st = old.Stats() // counters carry over a reload
	}
	return teacher.New(cfg, teacher.Deps{Tokenizer: d.tokenizer, Logger: d.opts.Log, Stats: st})
}

// reloadTeacher replaces the teacher settings (SIGHUP); rollouts already with the
// teacher finish with the old ones, and each hint keeps its own template.
func (d *daemon) reloadTeacher(cfg teacher.Config) error {
	h, err := d.newHinter(cfg)
	if err != nil {
		return err
	}
	d.hinter.Store(h)
	d.log.Info().Strs("chain", cfg.Chain).Msg("teacher reloaded")
	return nil
}

// reloadLoop re-reads the config file on each Reload signal and swaps in its teacher
// settings; a bad file is logged and the running settings stay.
func (d *daemon) reloadLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.opts.Reload:
		}
		if d.opts.ConfigPath == "" {
			d.log.Warn().Msg("SIGHUP: no config file to reload (started without -config)")
			continue
		}
		cfg, err := LoadConfig(d.opts.ConfigPath)
		if err == nil {
			err = d.reloadTeacher(cfg.Teacher)
		}
		if err != nil {
			d.log.Error().Err(err).Msg("SIGHUP: teacher settings not reloaded; the running ones stay")
		}
	}
}

// watchdogAlive reports whether the device loop made progress recently enough for a
// systemd watchdog ping: a hung step stops the pings, so systemd restarts us.
func (d *daemon) watchdogAlive(every time.Duration) bool {
	if !d.training() {
		return true
	}
	last := d.beat.Load()
	return last == 0 || time.Since(time.Unix(0, last)) < 2*every
}

// handToTrainer sends a decided file with accepted rollouts to the pipeline, with the
// rows Process kept (nil: feed streams them from the spool); it blocks while the
// pipeline is full (the spool is the backlog). ctx is the ingest stage's (it ends
// when the pipeline stops), work the file's.
func (d *daemon) handToTrainer(ctx, work context.Context, c *rollout.ClaimState, rep *rollout.FileReport, rows []keptRow) error {
	if c.Decisions == nil {
		if o := d.spool.Journal().Open(c.Seq); o != nil {
			c = o // the journal's copy holds the decisions the ledger reads
		}
	}
	select {
	case d.q.files <- &decidedFile{File: &ledger.File{Claim: c, Report: rep}, rows: rows}:
		return nil
	case <-work.Done():
		return errStopped
	case <-ctx.Done():
		return errStopped
	}
}
