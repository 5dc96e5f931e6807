package train

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// Item is one rollout on its way to the device, or the end marker of a file. The
// teacher resolves it (Resolve) while it waits in the ordered queue; the loop takes
// items in order and waits for each to be resolved.
type Item struct {
	File    *ledger.File
	Row     int              // row of the rollout in its file
	Rollout *rollout.Rollout // owned (cloned out of the spool's record batch)
	// End marks the file's last item; Already counts its accepted rollouts that were
	// trained before this process saw the file (ledger.Before).
	End     bool
	Already int

	hints teacher.Result
	ready chan struct{}
}

// NewItem returns an unresolved item for rollout r at row of f.
func NewItem(f *ledger.File, row int, r *rollout.Rollout) *Item {
	return &Item{File: f, Row: row, Rollout: r, ready: make(chan struct{})}
}

// NewEnd returns the resolved end marker of f.
func NewEnd(f *ledger.File, already int) *Item {
	it := &Item{File: f, End: true, Already: already, ready: make(chan struct{})}
	close(it.ready)
	return it
}

// Resolve sets the teacher's result; call it once, from the teacher worker.
func (it *Item) Resolve(res teacher.Result) {
	it.hints = res
	close(it.ready)
}

// Observer is told what the loop does, for status, metrics and progress lines. Its
// methods are called on the device goroutine and must not block.
type Observer interface {
	// Heartbeat: the loop made progress (for the systemd watchdog).
	Heartbeat()
	// Batch: the batch now holds rollouts with tokens trainable tokens.
	Batch(rollouts, tokens int)
	// Hints: hints of a rollout the loop took.
	Hints(hs []teacher.Hint)
	// Skipped: a rollout skipped for policy lag.
	Skipped()
	// Failed: a rollout the device cannot train (err says why) in file.
	Failed(err error, file string)
	// Stepped: an optimizer step; stepped counts the tokens of the rollouts stepped in
	// this process.
	Stepped(met xla.Metrics, stepped int64)
	// Checkpointed: a durable checkpoint of step at dir; trained and updates are the
	// trainer's totals.
	Checkpointed(step int64, dir string, at time.Time, trained, updates int64)
	// FileDone: a file left processing/, all its rollouts trained.
	FileDone(f ledger.Finished)
	// Awaiting: files whose rollouts all reached the device but are not all trained.
	Awaiting(n int64)
}

// Pauser is the run's pause state: while Paused the loop takes no item and starts no
// step; while the disk is full it writes no checkpoint.
type Pauser interface {
	// Paused reports whether taking and stepping pause, and a channel closed at the
	// next change.
	Paused() (bool, <-chan struct{})
	// DiskFull reports whether a write failed with a full disk and no retry has
	// succeeded since.
	DiskFull() bool
}

// Checkpoint is a checkpoint just written, for Options.AfterCheckpoint.
type Checkpoint struct {
	Dir     string
	Step    int64
	Trainer *xla.Trainer // the weights of the checkpoint; the hook runs on the device goroutine
}

// Options are everything the loop needs.
type Options struct {
	Config        Config        // train:
	Credit        credit.Config // credit:
	Backend       string        // GoMLX backend spec, resolved (xla.ResolveBackend)
	ModelDir      string        // the model directory: config and tokenizer files, initial weights
	Precision     xla.Precision // model.precision: f32 ("") or bf16
	Tokenizer     tokenizer.Tokenizer
	CheckpointDir string
	ResumeFrom    int64 // restore this step instead of the newest; < 0: the newest
	// Version and ConfigYAML are stored in each checkpoint's trainer_state.json.
	Version    string
	ConfigYAML []byte

	Ledger *ledger.Ledger
	Retry  ledger.Retry // runs each durable write, pausing on a full disk
	Pause  Pauser
	// Busy reports whether work is still on its way upstream (a file being decided or
	// read, rollouts with the teacher): the loop is idle only when it is not.
	Busy func() bool
	// Siblings, when set, gives each step's rollouts their teacher contexts that need
	// the whole step (teacher.context: sibling) just before the step: the daemon
	// passes its current teacher's Hinter.Siblings. nil: hints as the teacher left
	// them.
	Siblings func(step []teacher.StepRollout) [][]teacher.Hint
	// AfterCheckpoint, when set, runs on the device goroutine after each checkpoint
	// (after the files it finished); an error stops the loop.
	AfterCheckpoint func(ctx context.Context, c Checkpoint) error
	Log             zerolog.Logger
}

// Info describes the loaded policy.
type Info struct {
	BackendName, Device string
	Parameters          int64
	ModelDir            string
	Step, Updates       int64
	Trained             int64 // rollouts in the weights, lifetime
	// Checkpoint is the restored checkpoint (empty: the model directory's weights).
	Checkpoint   string
	CheckpointAt time.Time
}
