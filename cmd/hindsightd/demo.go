package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/daemon"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// demoConfig adjusts the embedded defaults for -demo: small steps so the tiny model
// trains a few of them in seconds, a learning rate that moves it, a checkpoint as
// soon as the spool is drained.
func demoConfig(cfg daemon.Config) daemon.Config {
	cfg.Train.TokenBudget = 512
	cfg.Train.IdleFlush = 200 * time.Millisecond
	cfg.Train.Optimizer.LR = 1e-3
	cfg.Train.Optimizer.WarmupSteps = 1
	cfg.Train.Checkpoint.EverySteps = 0
	return cfg
}

// runDemo is hindsightd -demo: synthesize a few agent rollouts into incoming/ (plus
// one file with bad rows and one truncated file, to show rejection and quarantine),
// have the daemon process and train on everything waiting (daemon.Options.Drain),
// print progress and a summary to out, and return.
func runDemo(ctx context.Context, cfg daemon.Config, opts daemon.Options, out io.Writer) error {
	dm := &demo{cfg: cfg, out: out}
	opts.Drain, opts.Events = true, dm
	if err := daemon.Run(ctx, cfg, opts); err != nil {
		return err
	}
	dm.summary()
	return nil
}

// demo prints the run's progress; it is the run's daemon.Events.
type demo struct {
	cfg daemon.Config
	out io.Writer

	start         time.Time
	before, after *hindsightv1.Status

	mu      sync.Mutex // FileDecided and Stepped come from different goroutines
	decided int64      // tokens accepted in this run
}

func (dm *demo) incoming() string { return filepath.Join(dm.cfg.SpoolDir(), rollout.DirIncoming) }

// Ready writes the demo's files into incoming/ before anything is claimed.
func (dm *demo) Ready(st *hindsightv1.Status) error {
	dm.before = st
	fmt.Fprintf(dm.out, "hindsightd demo: data directory %s\n", st.GetDataDir())
	// The daemon logged its probe, but the demo shows errors only: say it here too.
	if f, err := fsutil.Probe(st.GetDataDir()); err == nil {
		fmt.Fprintf(dm.out, "storage: %s, renames: %s\n", f.FSType, f.RenameMode())
	}
	training := st.GetTraining() != nil
	if training {
		b := st.GetBackend()
		fmt.Fprintf(dm.out, "policy: %s (%d parameters) on %s, %s\n", b.GetModelDir(), b.GetParameters(), b.GetName(), b.GetDevice())
		fmt.Fprintf(dm.out, "backend: %s\n", b.GetChoice())
	}
	prefix := fmt.Sprintf("demo-%s-%d", time.Now().UTC().Format("20060102T150405"), st.GetTotal().GetJournalSeq()+1)
	files, err := writeDemoRollouts(dm.incoming(), prefix, training)
	if err != nil {
		return err
	}
	fmt.Fprintf(dm.out, "synthesized %d rollout files into %s\n", files, dm.incoming())
	if training {
		fmt.Fprintf(dm.out, "training on the accepted rollouts as they come (a step every %d trainable tokens):\n", dm.cfg.Train.TokenBudget)
	}
	dm.start = time.Now()
	return nil
}

// FileDecided prints one line per decided file.
func (dm *demo) FileDecided(rep *rollout.FileReport, training bool) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	dm.decided += rep.Tokens
	if rep.Quarantine != nil {
		fmt.Fprintf(dm.out, "  %-48s quarantined: %s\n", rep.Claimed, rep.Quarantine.Code)
		return
	}
	dest := filepath.Base(filepath.Dir(rep.Dest)) + "/"
	if training {
		dest = "training"
	}
	fmt.Fprintf(dm.out, "  %-48s %d accepted, %d rejected, %7d tokens → %s\n", rep.Claimed, rep.Accepted,
		rep.Rejected, rep.Tokens, dest)
	for _, p := range rep.Problems {
		fmt.Fprintf(dm.out, "      rejected row %d (%s): %s %s\n", p.Row, p.RolloutID, p.Code, p.Reason)
	}
}

// Stepped prints one line per optimizer step, with the loss and an ETA.
func (dm *demo) Stepped(met xla.Metrics, stepped int64) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	total := dm.decided
	eta := "?"
	if stepped > 0 && total > 0 {
		el := time.Since(dm.start)
		eta = (time.Duration(float64(el) * float64(max(total-stepped, 0)) / float64(stepped))).Round(time.Second).String()
	}
	if !met.Updated {
		why := "no signal (no hint credit, no outcome advantage)"
		if met.Credit.Tokens == 0 {
			why = "no trainable token (the log says why)"
		}
		fmt.Fprintf(dm.out, "  step %3d  %s: weights unchanged  %5d/%d tokens  ETA %s\n",
			met.Step, why, stepped, total, eta)
		return
	}
	tps := float64(met.Tokens) / max(met.Took.Seconds(), 1e-9)
	fmt.Fprintf(dm.out, "  step %3d  loss %+.5f  %6.0f tokens/s  %5d/%d tokens  ETA %s\n", met.Step, met.Loss, tps, stepped, total, eta)
}

// FileTrained prints one line per trained file.
func (dm *demo) FileTrained(rep *rollout.FileReport, rows int, creditFile string) {
	dm.mu.Lock()
	defer dm.mu.Unlock()
	fmt.Fprintf(dm.out, "  %-48s %d rollouts trained → done/, %s\n", rep.Claimed, rows, filepath.Base(creditFile))
}

// Stopped keeps the last status for the summary.
func (dm *demo) Stopped(st *hindsightv1.Status) { dm.after = st }

// summary prints what the run did and where everything is.
func (dm *demo) summary() {
	took := time.Since(dm.start)
	b, a := dm.before.GetTotal(), dm.after.GetTotal()
	tokens := a.GetTokensIngested() - b.GetTokensIngested()
	fmt.Fprintf(dm.out, "\nsummary: %d files: %d done, %d failed (no surviving row), %d quarantined\n",
		a.GetFilesClaimed()-b.GetFilesClaimed(), a.GetFilesDone()-b.GetFilesDone(),
		a.GetFilesFailed()-b.GetFilesFailed(), a.GetFilesQuarantined()-b.GetFilesQuarantined())
	fmt.Fprintf(dm.out, "         %d rollouts accepted (%d tokens), %d rejected, in %s (%.0f tokens/s)\n",
		a.GetRolloutsAccepted()-b.GetRolloutsAccepted(), tokens, a.GetRolloutsRejected()-b.GetRolloutsRejected(),
		took.Round(time.Millisecond), float64(tokens)/math.Max(took.Seconds(), 1e-9))
	if t := dm.after.GetTraining(); t != nil {
		fmt.Fprintf(dm.out, "         trained: step %d, %d rollouts in the weights, last loss %.5g\n", t.Step, t.RolloutsTrained, t.Loss)
	}
	spool := dm.cfg.SpoolDir()
	fmt.Fprintf(dm.out, "\nwhere everything is:\n")
	fmt.Fprintf(dm.out, "  journal      %s\n", dm.cfg.JournalPath())
	fmt.Fprintf(dm.out, "  done files   %s\n", filepath.Join(spool, rollout.DirDone))
	fmt.Fprintf(dm.out, "  failed files %s  (*.error says why; *.rejected.arrow holds rejected rows)\n", filepath.Join(spool, rollout.DirFailed))
	if ck := dm.after.GetLastCheckpoint(); ck != nil {
		fmt.Fprintf(dm.out, "  checkpoint   %s  (a Hugging Face model directory; trainer_state.json counts the trained rollouts)\n", ck.Path)
		fmt.Fprintf(dm.out, "  credit files %s  (one <file>.credit.arrow per input file: per-token student/teacher log-probs, advantages, hints)\n", dm.cfg.OutputPath())
		fmt.Fprintf(dm.out, "\nlook at them:\n")
		fmt.Fprintf(dm.out, "  %s inspect -html credit.html %s/*.credit.arrow   # a page: each token coloured by its credit, hints inline\n", cliCommand(), dm.cfg.OutputPath())
		fmt.Fprintf(dm.out, "  cat %s/trainer_state.json | head -c 600\n", ck.Path)
	}
	fmt.Fprintf(dm.out, "\nnext: run hindsightd without -demo to watch %s, and `%s status` to query it\n", dm.incoming(), cliCommand())
	if cliCommand() != "hindsight" {
		fmt.Fprintf(dm.out, "(`go install ./cmd/hindsight ./cmd/hindsightd` puts both on your PATH, in $(go env GOPATH)/bin)\n")
	}
}

// cliCommand is how the closing hints run the CLI: hindsight when it is on PATH, else
// `go run ./cmd/hindsight` from a checkout of the repository (the quick start runs the
// demo with go run, which puts nothing on PATH).
func cliCommand() string {
	if _, err := exec.LookPath("hindsight"); err == nil {
		return "hindsight"
	}
	if _, err := os.Stat(filepath.Join("cmd", "hindsight", "main.go")); err == nil {
		return "go run ./cmd/hindsight"
	}
	return "hindsight"
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
