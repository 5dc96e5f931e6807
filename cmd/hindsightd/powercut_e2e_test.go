package main

// The power-loss test: hindsightd on internal/powercut, a FUSE file system that loses
// whatever was not fsynced when the test cuts the power.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/fusetest"
	"github.com/hindsight-ai/hindsight/internal/powercut"
	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
)

// cutPoint is a chosen operation to cut the power at: the nth operation of kind whose
// path matches re, counted from the daemon's start.
type cutPoint struct {
	name string
	kind string
	re   *regexp.Regexp
	nth  int
}

// cutPoints are the durable steps the LazyFS audit cut at, in the order a run meets
// them, so that each fires before the spool runs dry.
var cutPoints = []cutPoint{
	{"claim rename", "rename", regexp.MustCompile(`spool/incoming/.* -> .*spool/processing/`), 1},
	{"journal fsync", "fsync", regexp.MustCompile(`state/journal\.jsonl$`), 3},
	{"staged credit rows", "rename", regexp.MustCompile(`state/credit/`), 1},
	{"checkpoint file fsync", "fsync", regexp.MustCompile(`checkpoints/\.tmp-step-`), 2},
	{"checkpoint directory fsync", "fsyncdir", regexp.MustCompile(`checkpoints/\.tmp-step-[^/]*$`), 1},
	{"checkpoint rename", "rename", regexp.MustCompile(`checkpoints/\.tmp-step-[^/]* -> .*checkpoints/step-`), 1},
	{"checkpoints fsync after the rename", "fsyncdir", regexp.MustCompile(`checkpoints$`), 1},
	{"latest", "rename", regexp.MustCompile(`checkpoints/\.latest\.tmp -> `), 1},
	{"pruning", "rmdir", regexp.MustCompile(`checkpoints/step-`), 1},
	{"credit publish", "rename", regexp.MustCompile(`outputs/\..*\.tmp-[0-9]+ -> `), 1},
	{"done/ move", "rename", regexp.MustCompile(`spool/processing/.* -> .*spool/done/`), 1},
	{"done/ fsync", "fsyncdir", regexp.MustCompile(`spool/done$`), 1},
}

// TestPowerCut trains on a file system that loses everything not fsynced at each cut:
// at each chosen durable step, then at random moments, it cuts the power, remounts
// what was durable and restarts the daemon. At the end (after one more cut, following
// a clean shutdown) the weights must equal a run that was never cut, every input file
// must be in done/ once, every rollout in one credit row, and the journal must parse.
func TestPowerCut(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		fusetest.Unavailable(t, "no /dev/fuse: "+err.Error())
	}
	names, seed := stagedRollouts(t, 12, 2)
	clean := func(dataDir string) {
		p := startDaemon(t, "-config", trainConfigSteps(t, dataDir, 128, 1))
		addr := p.waitReady(t)
		waitTrained(t, p, addr, 12)
		p.stop(t, 60*time.Second)
	}
	ref := t.TempDir()
	seed(ref)
	clean(ref)

	// Where renameat2 refuses RENAME_NOREPLACE (as on NFS and bindfs) the daemon's
	// no-replace renames check, then rename; where it works they use it. Both paths
	// meet every chosen cut; the fallback also gets more random cuts.
	for _, mode := range []struct {
		name       string
		noReplace  bool
		randomCuts int
	}{{"check-then-rename", false, 8}, {"renameat2", true, 4}} {
		t.Run(mode.name, func(t *testing.T) {
			powerCuts(t, ref, names, seed, powercut.Options{RenameNoReplace: mode.noReplace}, mode.name, mode.randomCuts)
		})
	}
}

// powerCuts is TestPowerCut on one powercut file system: the chosen cuts, randomCuts
// random ones, a cut after a clean shutdown, and the checks against the run in ref.
// The daemon must report renameMode.
func powerCuts(t *testing.T, ref string, names []string, seed func(string), opts powercut.Options, renameMode string, randomCuts int) {
	clean := func(dataDir string) {
		p := startDaemon(t, "-config", trainConfigSteps(t, dataDir, 128, 1))
		addr := p.waitReady(t)
		waitTrained(t, p, addr, 12)
		p.stop(t, 60*time.Second)
		m := renameModeRe.FindStringSubmatch(p.log())
		require.NotNil(t, m, "no storage line in the log")
		require.Equal(t, renameMode, m[1])
	}
	fsys := powercut.New(opts)
	mnt := t.TempDir()
	if err := fsys.Mount(mnt); err != nil {
		fusetest.Unavailable(t, err.Error())
	}
	t.Cleanup(func() { require.NoError(t, fsys.Unmount()) })
	dataDir := filepath.Join(mnt, "data")
	seed(dataDir)
	fsys.SyncAll() // the collectors' files were durable long before

	// cut runs the daemon until fired (or, if nil, a random moment) and cuts the power.
	rng := rand.New(rand.NewPCG(5, 6))
	cut := func(fired <-chan powercut.Op, label string) bool {
		p := startDaemon(t, "-config", trainConfigSteps(t, dataDir, 128, 1))
		var timer <-chan time.Time
		if fired == nil {
			timer = time.After(time.Duration(200+rng.IntN(2500)) * time.Millisecond)
		}
		deadline := time.After(testwait.Guard(3 * time.Minute))
		hit := false
	wait:
		for {
			select {
			case op := <-fired:
				t.Logf("cut at %s: %s", label, op)
				hit = true
				break wait
			case <-timer:
				hit = true
				break wait
			case <-p.done:
				t.Fatalf("hindsightd exited before the cut: %v\n%s", p.err, p.log())
			case <-deadline:
				l := p.log()
				t.Logf("cut at %s: never reached (hang guard); log tail:\n%s", label, l[max(0, len(l)-4000):])
				break wait
			case <-time.After(time.Second):
				if m := listenRe.FindStringSubmatch(p.log()); m != nil {
					st := statusOf(t, m[1])
					if st.GetTraining().GetRolloutsTrained() >= 12 && st.GetSpool().GetIncoming() == 0 && st.GetSpool().GetProcessing() == 0 {
						t.Logf("cut at %s: never reached (all trained)", label)
						break wait
					}
				}
			}
		}
		fsys.Freeze()
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		fsys.Cut()
		p.wait(t, 30*time.Second)
		require.NoError(t, fsys.Unmount())
		require.NoError(t, fsys.Mount(mnt))
		return hit
	}
	hits := 0
	for _, cp := range cutPoints {
		seen := 0
		fired := fsys.CutAt(func(op powercut.Op) bool {
			if op.Kind == cp.kind && cp.re.MatchString(op.Path) {
				seen++
				return seen == cp.nth
			}
			return false
		})
		if cut(fired, cp.name) {
			hits++
		}
	}
	for i := 0; i < randomCuts; i++ {
		cut(nil, "a random moment")
	}
	t.Logf("%d of %d chosen cuts reached, %d random cuts; operations served: %v", hits, len(cutPoints), randomCuts, fsys.Counts())
	require.GreaterOrEqual(t, hits, len(cutPoints)-2, "most chosen cuts must land, or this test proves little")

	// Finish, cut the power after the clean shutdown too, and finish again: what a
	// clean shutdown leaves must be durable or redone.
	clean(dataDir)
	fsys.Freeze()
	fsys.Cut()
	require.NoError(t, fsys.Unmount())
	require.NoError(t, fsys.Mount(mnt))
	clean(dataDir)
	requirePowerCutResult(t, ref, dataDir, names)
}

// requirePowerCutResult checks what LazyFS checked: weights equal to the clean run,
// every input file in done/ once, no rollout trained or credited twice, and a journal
// of whole lines.
func requirePowerCutResult(t *testing.T, ref, dataDir string, inputs []string) {
	t.Helper()
	refDir, refState, err := checkpoint.Latest(filepath.Join(ref, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	gotDir, gotState, err := checkpoint.Latest(filepath.Join(dataDir, "checkpoints"), zerolog.Nop())
	require.NoError(t, err)
	require.EqualValues(t, 12, gotState.TrainedTotal)
	require.Equal(t, refState.Step, gotState.Step)
	worst := maxTensorDiff(t, filepath.Join(refDir, safetensors.FileName), filepath.Join(gotDir, safetensors.FileName))
	t.Logf("final step %d: largest weight difference from the run never cut %.3g", gotState.Step, worst)
	require.Less(t, worst, 1e-5)

	claimed := regexp.MustCompile(`^[0-9]{8}-`)
	done := map[string]int{}
	for _, n := range listDir(t, filepath.Join(dataDir, "spool", "done")) {
		done[claimed.ReplaceAllString(n, "")]++
	}
	for _, n := range inputs {
		require.Equal(t, 1, done[n], "%s in done/ once: %v", n, done)
	}
	require.Len(t, done, len(inputs))
	require.Empty(t, listDir(t, filepath.Join(dataDir, "spool", "incoming")))
	require.Empty(t, listDir(t, filepath.Join(dataDir, "spool", "processing")))

	b, err := os.ReadFile(filepath.Join(dataDir, "state", "journal.jsonl"))
	require.NoError(t, err)
	require.True(t, len(b) > 0 && b[len(b)-1] == '\n', "the journal ends on a whole line")
	accepted := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		var e rollout.Entry
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), "journal line %d: %s", line, sc.Text())
		for _, r := range e.Rows {
			if r.Accepted && e.Op == rollout.OpDecide {
				accepted[r.ID]++
			}
		}
	}
	require.NoError(t, sc.Err())
	require.Len(t, accepted, 12)
	credited := map[string]int{}
	for _, n := range listDir(t, filepath.Join(dataDir, "outputs")) {
		rs, err := creditfile.Read(filepath.Join(dataDir, "outputs", n))
		require.NoError(t, err, n)
		for _, r := range rs {
			credited[r.RolloutID]++
		}
	}
	for id, n := range accepted {
		require.Equal(t, 1, n, "the journal accepts %s once", id)
		require.Equal(t, 1, credited[id], "one credit row for %s", id)
	}
	require.Len(t, credited, 12, fmt.Sprint(credited))
	requireNoTemps(t, dataDir)
}
