package daemon

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/hindsight-ai/hindsight/rollout"
)

// runDemo is hindsightd -demo: synthesize a few agent rollouts into incoming/ (plus
// one file with bad rows and one truncated file, to show rejection and quarantine),
// process everything waiting, print progress and a summary, and return.
func (d *daemon) runDemo(ctx context.Context) error {
	fmt.Fprintf(d.out, "hindsightd demo: data directory %s\n", d.stats.dataDir)
	if err := d.recover(ctx, ctx); err != nil {
		return err
	}
	incoming := d.spool.Dir(rollout.DirIncoming)
	before := d.spool.Journal().Totals()
	files, err := writeDemoRollouts(incoming, fmt.Sprintf("demo-%s-%d", time.Now().UTC().Format("20060102T150405"), before.LastSeq+1))
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "synthesized %d rollout files into %s\n", files, incoming)
	d.stats.setState(stateReady)
	start := time.Now()
	if err := d.drainIncoming(ctx, ctx); err != nil {
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
	fmt.Fprintf(d.out, "\nwhere everything is:\n")
	fmt.Fprintf(d.out, "  journal      %s\n", d.cfg.JournalPath())
	fmt.Fprintf(d.out, "  done files   %s\n", d.spool.Dir(rollout.DirDone))
	fmt.Fprintf(d.out, "  failed files %s  (*.error says why; *.rejected.arrow holds rejected rows)\n", d.spool.Dir(rollout.DirFailed))
	fmt.Fprintf(d.out, "\nnext: run hindsightd without -demo to watch %s, and `hindsight status` to query it\n", incoming)
	return nil
}

// reportProgress prints one line per finished file in -demo.
func (d *daemon) reportProgress(rep *rollout.FileReport) {
	if !d.opts.Demo {
		return
	}
	switch {
	case rep.Quarantine != nil:
		fmt.Fprintf(d.out, "  %-48s quarantined: %s\n", rep.Claimed, rep.Quarantine.Code)
	default:
		fmt.Fprintf(d.out, "  %-48s %d accepted, %d rejected, %7d tokens → %s/\n", rep.Claimed, rep.Accepted,
			rep.Rejected, rep.Tokens, filepath.Base(filepath.Dir(rep.Dest)))
		for _, p := range rep.Problems {
			fmt.Fprintf(d.out, "      rejected row %d (%s): %s %s\n", p.Row, p.RolloutID, p.Code, p.Reason)
		}
	}
}

// writeDemoRollouts writes the demo's files into dir and returns how many. Rollout ids
// start with prefix, which carries the next claim sequence, so a second demo on the
// same data directory adds new rollouts rather than duplicates.
func writeDemoRollouts(dir, prefix string) (int, error) {
	opts := rollout.SynthOptions{N: 12, Tokens: 6000, Seed: 1, PerFile: 4, IDPrefix: prefix}
	paths, err := rollout.WriteSynth(dir, opts)
	if err != nil {
		return 0, err
	}

	// A file with two bad rows among good ones: row-level rejection.
	bad := []*rollout.Rollout{rollout.Synthesize(opts, 100), rollout.Synthesize(opts, 101), rollout.Synthesize(opts, 102)}
	bad[1].LogProbs = append([]float32(nil), bad[1].LogProbs...)
	bad[1].LogProbs[len(bad[1].LogProbs)-3] = float32(math.NaN())
	bad[2].Segments = append([]rollout.Segment(nil), bad[2].Segments...)
	bad[2].Segments[2].End = bad[2].Segments[3].Start + 5 // overlaps the next segment
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
