package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
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
	d.log.Info().Str("model_dir", dir).Str("preset", d.cfg.Model.InitPreset).Int("vocab_size", mc.VocabSize).
		Msg("created the default model")
	return nil
}

// openTraining loads the policy and the teacher, and cleans staging folders of
// finished files.
func (d *daemon) openTraining() error {
	h, err := d.newHinter(d.cfg.Teacher)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	d.hinter.Store(h)
	dv, done, err := d.openDevice()
	if err != nil {
		return err
	}
	d.dev = dv
	d.doneIDs = done
	d.q = newQueues(d.cfg.Train.TeacherConcurrency)
	return removeStaleStaging(d.cfg.StagingDir(), d.spool.Journal().Unfinished())
}

// newHinter builds the teacher from cfg, caching LLM hints under the data directory.
func (d *daemon) newHinter(cfg teacher.Config) (*teacher.Hinter, error) {
	if cfg.CacheDir == "" {
		cfg.CacheDir = d.cfg.TeacherCacheDir()
	}
	if t := &cfg.Template; t.Preset == "chatml" && t.Prefix == "" && t.Suffix == "" && d.tokenizer.Fingerprint() == rollout.BytesTokenizer {
		t.Preset = "bytes" // the default preset, on the byte tokenizer, which has no ChatML markers
	}
	var st *teacher.Stats
	if old := d.hinter.Load(); old != nil {
		st = old.Stats() // counters carry over a reload
	}
	return teacher.New(cfg, teacher.Deps{Tokenizer: d.tokenizer, Logger: d.opts.Log, Stats: st})
}

// ReloadTeacher replaces the teacher settings (SIGHUP); rollouts already with the
// teacher finish with the old ones.
func (d *daemon) reloadTeacher(cfg teacher.Config) error {
	h, err := d.newHinter(cfg)
	if err != nil {
		return err
	}
	d.hinter.Store(h)
	d.log.Info().Strs("chain", cfg.Chain).Msg("teacher reloaded")
	return nil
}

// startPipeline starts feed, the teacher workers and the device loop under g.
func (d *daemon) startPipeline(g *errgroup.Group, ctx, work context.Context) {
	done := d.doneIDs
	d.doneIDs = nil
	d.pipeDone = ctx.Done()
	g.Go(func() error { return d.feed(ctx, d.q, done) })
	for range d.cfg.Train.TeacherConcurrency {
		g.Go(func() error { return d.teachRollouts(ctx, d.q, d.log) })
	}
	g.Go(func() error {
		err := d.dev.run(ctx, work, d.q)
		if err != nil {
			d.stats.setError(err, "")
		}
		return err
	})
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

// handToTrainer sends a decided file with accepted rollouts to the pipeline; it
// blocks while the pipeline is full (the spool is the backlog).
func (d *daemon) handToTrainer(ctx context.Context, c *rollout.ClaimState, rep *rollout.FileReport) error {
	if c.Decisions == nil {
		if o := d.spool.Journal().Open(c.Seq); o != nil {
			c = o
		}
	}
	select {
	case d.q.files <- &fileJob{claim: c, rep: rep}:
		return nil
	case <-ctx.Done():
		return errStopped
	case <-d.pipeDone:
		return errStopped
	}
}

// fileFinished records a file that left processing/ after training.
func (d *daemon) fileFinished(rep *rollout.FileReport, rows int, creditFile string) {
	d.stats.fileDone(rep, 0)
	d.metrics.fileDone(rep)
	d.stats.creditFile()
	d.log.Info().Uint64("seq", rep.Seq).Str("file", rep.Claimed).Int("rollouts", rows).Str("credit_file", creditFile).
		Str("outcome", rep.Outcome).Msg("file trained")
	d.reportTrained(rep, rows, creditFile)
	d.stats.publish()
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
