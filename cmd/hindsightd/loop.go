package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/daemon"
	"github.com/hindsight-ai/hindsight/eval"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// loopConfig is -loop's own defaults, which a -config file goes on top of: short
// steps with a checkpoint after each, a learning rate that moves the tiny model, and a
// held-out task-world eval of every checkpoint without a time budget.
func loopConfig(cfg daemon.Config) daemon.Config {
	cfg.Train.TokenBudget = 1024
	cfg.Train.IdleFlush = time.Second
	cfg.Train.Optimizer.LR = 1e-3
	cfg.Train.Optimizer.WarmupSteps = 1
	cfg.Train.Checkpoint.EverySteps = 1
	cfg.Eval.Budget = 0
	cfg.Eval.Suites = []eval.SuiteConfig{{Name: "heldout", Kind: eval.KindToolworld, Split: toolworld.SplitHeldout, Tasks: 50}}
	return cfg
}

// checkLoopConfig refuses a config the loop cannot run with: no training, or, with
// -loop-steps, nothing that would ever evaluate the checkpoint of that step (no
// checkpoints, or no eval suite), so the run would never stop.
func checkLoopConfig(cfg daemon.Config, steps int64) error {
	if !cfg.Train.Enabled {
		return errors.New("-loop needs train.enabled")
	}
	if steps <= 0 {
		return nil
	}
	ck := cfg.Train.Checkpoint
	if ck.EverySteps == 0 && ck.Every == 0 {
		return fmt.Errorf("-loop-steps %d stops once the checkpoint of step %d is evaluated, but the config turns checkpoints off (train.checkpoint.every_steps and every are 0); drop them from the file (-loop checkpoints every step) or set one", steps, steps)
	}
	if len(cfg.Eval.Suites) == 0 {
		return fmt.Errorf("-loop-steps %d stops once the checkpoint of step %d is evaluated, but the config has no eval.suites; drop eval.suites from the file (-loop evaluates 50 held-out task-world tasks) or list a suite", steps, steps)
	}
	return nil
}

// loopOptions are the -loop flags.
type loopOptions struct {
	steps   int64 // stop once the checkpoint of this step is evaluated; 0: until interrupted
	group   int
	seed    uint64
	backend string // the resolved backend spec, the daemon's
}

// runLoop is hindsightd -loop: the daemon (serving status as usual) and, in the same
// process, a collector that samples task-world rollouts with the newest checkpoint
// into the spool; every checkpoint is evaluated (evals.jsonl). It prints a line per
// file, step and eval to out.
func runLoop(ctx context.Context, cfg daemon.Config, opts daemon.Options, lo loopOptions, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lp := &loop{cfg: cfg, out: out, lo: lo, ctx: ctx, stop: cancel, start: time.Now()}
	opts.Events = lp
	err := daemon.Run(ctx, cfg, opts)
	lp.wg.Wait()
	if err == nil {
		err = lp.collectErr
	}
	return err
}

// loop prints the loop's progress and runs the collector; it is the run's
// daemon.Events.
type loop struct {
	cfg   daemon.Config
	out   io.Writer
	lo    loopOptions
	ctx   context.Context
	stop  context.CancelFunc
	start time.Time

	wg         sync.WaitGroup
	mu         sync.Mutex
	collectErr error
}

// Ready starts the collector and the eval follower once the daemon has its policy.
func (l *loop) Ready(st *hindsightv1.Status) error {
	modelDir, _ := l.cfg.ModelDir()
	incoming := filepath.Join(l.cfg.SpoolDir(), rollout.DirIncoming)
	b := st.GetBackend()
	fmt.Fprintf(l.out, "hindsightd loop: data directory %s, status on %s\n", st.GetDataDir(), st.GetListenAddr())
	fmt.Fprintf(l.out, "policy: %s (%d parameters) on %s; sampling %d rollouts per task-world task into %s\n",
		b.GetModelDir(), b.GetParameters(), b.GetName(), l.lo.group, incoming)
	for _, s := range l.cfg.Eval.Suites {
		fmt.Fprintf(l.out, "eval after every checkpoint: %s (%s)\n", s.Name, s.Kind)
	}
	// Only this loop writes "loop-" files into incoming/, and the daemon holds the data
	// directory's lock, so a "loop-*.arrow.tmp" there is a write a crash cut short.
	stale, err := filepath.Glob(filepath.Join(incoming, "loop-*.arrow.tmp"))
	if err != nil {
		return fmt.Errorf("remove the collector's temp files: %w", err)
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the collector's temp files: %w", err)
		}
		fmt.Fprintf(l.out, "removed %s: a file the collector was still writing when the last run stopped; never in the spool, never read\n", p)
	}
	copts := collect.Options{ModelDir: modelDir, Checkpoints: l.cfg.CheckpointDir(), Out: incoming,
		Backend: l.lo.backend, RunID: fmt.Sprintf("loop-%d", time.Now().Unix()),
		Episode: collect.EpisodeOptions{Group: l.lo.group, Temperature: 1, Seed: l.lo.seed}, Progress: l.out}
	l.wg.Add(2)
	go func() {
		defer l.wg.Done()
		if _, err := collect.Run(l.ctx, copts); err != nil {
			l.mu.Lock()
			l.collectErr = err
			l.mu.Unlock()
			fmt.Fprintf(l.out, "collector stopped: %v\n", err)
			l.stop()
		}
	}()
	go func() {
		defer l.wg.Done()
		l.followEvals()
	}()
	return nil
}

// followEvals prints each line appended to evals.jsonl and stops the run once the
// checkpoint of step lo.steps has been evaluated.
func (l *loop) followEvals() {
	path := l.cfg.EvalsPath()
	var off int64
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			f.Close()
			continue
		}
		br := bufio.NewReader(f)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				break // a partial line is read again next time
			}
			off += int64(len(line))
			var r eval.Result
			if json.Unmarshal(line, &r) != nil {
				continue
			}
			l.printEval(r)
			if l.lo.steps > 0 && r.Step >= l.lo.steps {
				fmt.Fprintf(l.out, "step %d evaluated: stopping (-loop-steps %d)\n", r.Step, l.lo.steps)
				l.stop()
			}
		}
		f.Close()
	}
}

func (l *loop) printEval(r eval.Result) {
	if r.Error != "" {
		fmt.Fprintf(l.out, "  eval %-10s step %3d  failed: %s\n", r.Suite, r.Step, r.Error)
		return
	}
	keys := make([]string, 0, len(r.Metrics))
	for k := range r.Metrics {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := []string{}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.3g", k, r.Metrics[k]))
	}
	fmt.Fprintf(l.out, "  eval %-10s step %3d  %s  (%.1fs)\n", r.Suite, r.Step, strings.Join(parts, ", "), r.Took)
}

func (l *loop) FileDecided(*rollout.FileReport, bool) {}

// Stepped prints one line per optimizer step.
func (l *loop) Stepped(met xla.Metrics, _ int64) {
	if !met.Updated {
		fmt.Fprintf(l.out, "  step %3d  no signal: weights unchanged (%d rollouts)\n", met.Step, met.Rollouts)
		return
	}
	fmt.Fprintf(l.out, "  step %3d  loss %+.5f  %d rollouts, %d tokens, %.0f tokens/s, |Δ| %.3g, clip %.1f%%\n", met.Step, met.Loss,
		met.Rollouts, met.Tokens, float64(met.Tokens)/max(met.Took.Seconds(), 1e-9), met.Credit.DeltaAbsMean, 100*met.Credit.ClipFraction)
}

func (l *loop) FileTrained(*rollout.FileReport, int, string) {}

// Stopped prints where everything is.
func (l *loop) Stopped(st *hindsightv1.Status) {
	fmt.Fprintf(l.out, "\nloop stopped after %s: step %d, %d rollouts trained\n", time.Since(l.start).Round(time.Second),
		st.GetTraining().GetStep(), st.GetTraining().GetRolloutsTrained())
	for _, b := range st.GetBestEvals() {
		fmt.Fprintf(l.out, "best %s: step %d, %s %.3g (%s)\n", b.GetSuite(), b.GetStep(), b.GetPrimary(), b.GetMetrics()[b.GetPrimary()], b.GetCheckpoint())
	}
	fmt.Fprintf(l.out, "evals: %s; checkpoints: %s\n", l.cfg.EvalsPath(), l.cfg.CheckpointDir())
}
