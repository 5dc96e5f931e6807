package daemon

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// DemoConfig adjusts the embedded defaults for -demo: small steps so the tiny model
// trains a few of them in seconds, a learning rate that moves it, a checkpoint as
// soon as the spool is drained.
func DemoConfig(cfg Config) Config {
	cfg.Train.TokenBudget = 512
	cfg.Train.IdleFlush = 200 * time.Millisecond
	cfg.Train.Optimizer.LR = 1e-3
	cfg.Train.Optimizer.WarmupSteps = 1
	cfg.Train.Checkpoint.EverySteps = 0
	return cfg
}

// runDemo is hindsightd -demo: synthesize a few agent rollouts into incoming/ (plus
// one file with bad rows and one truncated file, to show rejection and quarantine),
// process and train on everything waiting, print progress and a summary, and return.
func (d *daemon) runDemo(ctx context.Context) error {
	fmt.Fprintf(d.out, "hindsightd demo: data directory %s\n", d.stats.dataDir)
	if d.training() {
		b := d.stats.snapshot().GetBackend()
		fmt.Fprintf(d.out, "policy: %s (%d parameters) on %s, %s\n", b.GetModelDir(), b.GetParameters(), b.GetName(), b.GetDevice())
	}
	if !d.training() {
		if err := d.recover(ctx, ctx); err != nil {
			return err
		}
	}
	incoming := d.spool.Dir(rollout.DirIncoming)
	before := d.spool.Journal().Totals()
	files, err := writeDemoRollouts(incoming, fmt.Sprintf("demo-%s-%d", time.Now().UTC().Format("20060102T150405"), before.LastSeq+1), d.training())
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "synthesized %d rollout files into %s\n", files, incoming)
	d.stats.setState(stateReady)
	start := time.Now()
	if d.training() {
		if err := d.trainDemo(ctx, start, before.TokensAccepted); err != nil {
			return err
		}
	} else if err := d.drainIncoming(ctx, ctx); err != nil {
		return err
	}
	took := time.Since(start)
	after := d.spool.Journal().Totals()
	d.stats.setState(stateDraining)

	tokens := after.TokensAccepted - before.TokensAccepted
	fmt.Fprintf(d.out, "\nsummary: %d files: %d done, %d failed (no surviving row), %d quarantined\n",
		after.FilesClaimed-before.FilesClaimed, after.FilesDone-before.FilesDone,
		after.FilesFailed-before.FilesFailed, after.FilesQuarantined-before.FilesQuarantined)
	fmt.Fprintf(d.out, "         %d rollouts accepted (%d tokens), %d rejected, in %s (%.0f tokens/s)\n",
		after.RolloutsAccepted-before.RolloutsAccepted, tokens, after.RolloutsRejected-before.RolloutsRejected,
		took.Round(time.Millisecond), float64(tokens)/math.Max(took.Seconds(), 1e-9))
	if st := d.stats.snapshot(); st.GetTraining() != nil {
		t := st.Training
		fmt.Fprintf(d.out, "         trained: step %d, %d rollouts in the weights, last loss %.5g\n", t.Step, t.RolloutsTrained, t.Loss)
	}
	fmt.Fprintf(d.out, "\nwhere everything is:\n")
	fmt.Fprintf(d.out, "  journal      %s\n", d.cfg.JournalPath())
	fmt.Fprintf(d.out, "  done files   %s\n", d.spool.Dir(rollout.DirDone))
	fmt.Fprintf(d.out, "  failed files %s  (*.error says why; *.rejected.arrow holds rejected rows)\n", d.spool.Dir(rollout.DirFailed))
	if st := d.stats.snapshot(); st.GetLastCheckpoint() != nil {
		fmt.Fprintf(d.out, "  checkpoint   %s  (a Hugging Face model directory; trainer_state.json counts the trained rollouts)\n", st.LastCheckpoint.Path)
		fmt.Fprintf(d.out, "  credit files %s  (one <file>.credit.arrow per input file: per-token student/teacher log-probs, advantages, hints)\n", d.cfg.OutputPath())
		fmt.Fprintf(d.out, "\nlook at them:\n")
		fmt.Fprintf(d.out, "  python3 -c 'import glob, pyarrow as pa; t = pa.ipc.open_file(sorted(glob.glob(\"%s/*.credit.arrow\"))[0]).read_all(); print(t.schema); print(t.slice(0, 1).to_pylist()[0][\"hints\"])'\n", d.cfg.OutputPath())
		fmt.Fprintf(d.out, "  cat %s/trainer_state.json | head -c 600\n", st.LastCheckpoint.Path)
	}
	fmt.Fprintf(d.out, "\nnext: run hindsightd without -demo to watch %s, and `hindsight status` to query it\n", incoming)
	return nil
}

// trainDemo runs the training pipeline until every file has left processing/.
func (d *daemon) trainDemo(ctx context.Context, start time.Time, tokensBefore int64) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(pctx)
	d.startPipeline(g, gctx, gctx)
	fmt.Fprintf(d.out, "training on the accepted rollouts as they come (a step every %d trainable tokens):\n", d.cfg.Train.TokenBudget)
	d.onStep = func(met xla.Metrics, stepped int64) {
		total := d.spool.Journal().Totals().TokensAccepted - tokensBefore
		eta := "?"
		if stepped > 0 && total > 0 {
			el := time.Since(start)
			eta = (time.Duration(float64(el) * float64(max(total-stepped, 0)) / float64(stepped))).Round(time.Second).String()
		}
		if !met.Updated {
			fmt.Fprintf(d.out, "  step %3d  no signal (no hint credit, no outcome advantage): weights unchanged  %5d/%d tokens  ETA %s\n",
				met.Step, stepped, total, eta)
			return
		}
		tps := float64(met.Tokens) / max(met.Took.Seconds(), 1e-9)
		fmt.Fprintf(d.out, "  step %3d  loss %+.5f  %6.0f tokens/s  %5d/%d tokens  ETA %s\n", met.Step, met.Loss, tps, stepped, total, eta)
	}
	g.Go(func() error {
		defer close(d.q.files)
		if err := d.recover(gctx, gctx); err != nil {
			return err
		}
		if err := d.drainIncoming(gctx, gctx); err != nil {
			return err
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-gctx.Done():
				return nil
			case <-t.C:
			}
			if c, err := d.spool.Counts(); err == nil && c.Processing == 0 {
				cancel()
				return nil
			}
		}
	})
	return g.Wait()
}

// reportProgress prints one line per decided file in -demo.
func (d *daemon) reportProgress(rep *rollout.FileReport, training bool) {
	if !d.opts.Demo {
		return
	}
	switch {
	case rep.Quarantine != nil:
		fmt.Fprintf(d.out, "  %-48s quarantined: %s\n", rep.Claimed, rep.Quarantine.Code)
	default:
		dest := filepath.Base(filepath.Dir(rep.Dest)) + "/"
		if training {
			dest = "training"
		}
		fmt.Fprintf(d.out, "  %-48s %d accepted, %d rejected, %7d tokens → %s\n", rep.Claimed, rep.Accepted,
			rep.Rejected, rep.Tokens, dest)
		for _, p := range rep.Problems {
			fmt.Fprintf(d.out, "      rejected row %d (%s): %s %s\n", p.Row, p.RolloutID, p.Code, p.Reason)
		}
	}
}

// reportTrained prints one line per trained file in -demo.
func (d *daemon) reportTrained(rep *rollout.FileReport, rows int, creditFile string) {
	if !d.opts.Demo {
		return
	}
	fmt.Fprintf(d.out, "  %-48s %d rollouts trained → done/, %s\n", rep.Claimed, rows, filepath.Base(creditFile))
}

// writeDemoRollouts writes the demo's files into dir and returns how many. Rollout ids
// start with prefix, which carries the next claim sequence, so a second demo on the
// same data directory adds new rollouts rather than duplicates.
func writeDemoRollouts(dir, prefix string, small bool) (int, error) {
	opts := rollout.SynthOptions{N: 12, Tokens: 6000, Seed: 1, PerFile: 4, IDPrefix: prefix}
	if small { // the tiny model trains ~2k tokens/s on two cores
		opts.Tokens = 400
	}
	paths, err := rollout.WriteSynth(dir, opts)
	if err != nil {
		return 0, err
	}

	// A file with two bad rows among good ones: row-level rejection.
	bad := []*rollout.Rollout{rollout.Synthesize(opts, 100), rollout.Synthesize(opts, 101), rollout.Synthesize(opts, 102)}
	bad[1].LogProbs = append([]float32(nil), bad[1].LogProbs...)
	bad[1].LogProbs[len(bad[1].LogProbs)-3] = float32(math.NaN())
	bad[2].Segments = append([]rollout.Segment(nil), bad[2].Segments...)
	n := len(bad[2].Segments)
	bad[2].Segments[n-2].End = bad[2].Segments[n-1].Start + 5 // overlaps the next segment
	if err := rollout.WriteFile(filepath.Join(dir, prefix+"-badrows.arrow"), bad, rollout.WriteOptions{}); err != nil {
		return 0, fmt.Errorf("write demo rollouts: %w", err)
	}

	// A file cut short in transfer: file-level quarantine.
	tmp := filepath.Join(dir, prefix+"-truncated.arrow.tmp")
	if err := rollout.WriteFile(tmp, []*rollout.Rollout{rollout.Synthesize(opts, 200)}, rollout.WriteOptions{}); err != nil {
		return 0, fmt.Errorf("write demo rollouts: %w", err)
	}
	if st, err := os.Stat(tmp); err == nil {
		err = os.Truncate(tmp, st.Size()/2)
		if err == nil {
			err = os.Rename(tmp, filepath.Join(dir, prefix+"-truncated.arrow"))
		}
		if err != nil {
			return 0, fmt.Errorf("write demo rollouts: %w", err)
		}
	}
	return len(paths) + 2, nil
}
