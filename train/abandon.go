package train

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/xla"
)

// errAbandoned reports that the work context ended while a step ran on the device:
// the step was left behind and the loop returns without touching the trainer again.
var errAbandoned = errors.New("step abandoned at the shutdown timeout")

// deviceStep runs the trainer's step on a goroutine of its own and waits for it or
// for ctx (the work context, which ends when the shutdown timeout is nearly over).
// A device call cannot be interrupted (an XLA executable, or a compilation, runs to
// its end; the trainer looks at ctx only between chunks), so when ctx ends first the
// step is abandoned: its goroutine is left running, the trainer is not used again,
// and the process exits without a final checkpoint. Nothing is lost and nothing is
// trained twice: the step's rollouts become trained only with a durable checkpoint
// that lists them, so they are trained again after restart (docs/running.md
// "Stopping").
func (lp *Loop) deviceStep(ctx context.Context, batch []credit.Sequence) (xla.Metrics, error) {
	next := lp.tr.StepCount() + 1 // read here: the trainer is the step's from now on
	type result struct {
		met xla.Metrics
		err error
	}
	done := make(chan result, 1) // the abandoned goroutine's send never blocks
	go func() {
		if stepFault != nil {
			stepFault(next, lp.o.Log)
		}
		met, err := lp.tr.Step(ctx, batch)
		done <- result{met, err}
	}()
	select {
	case r := <-done:
		if r.err != nil && ctx.Err() != nil {
			lp.abandoned(next, len(batch), "stopped between chunks")
			return xla.Metrics{}, errAbandoned
		}
		return r.met, r.err
	case <-ctx.Done():
		lp.abandoned(next, len(batch), "left running on the device")
		return xla.Metrics{}, errAbandoned
	}
}

// abandoned logs a step given up at the shutdown timeout.
func (lp *Loop) abandoned(step int64, rollouts int, how string) {
	lp.o.Log.Warn().Int64("step", step).Int("rollouts", rollouts).Str("how", how).
		Msg("step abandoned: the shutdown timeout is nearly over; no final checkpoint, the last one stands and these rollouts are trained again after restart")
}

// stepFault, when set (only in binaries built with the devicefault tag, fault.go),
// runs on the device goroutine before each step.
var stepFault func(step int64, log zerolog.Logger)

// StallStepEnv names the variable that only a binary built with the devicefault tag
// (the end-to-end tests build one; releases never do) reads at start: when the step
// of that number starts, the device goroutine stalls without looking at its context,
// as a device call that cannot be interrupted does, and logs "device stalled".
const StallStepEnv = "HINDSIGHT_DEVICEFAULT_STALL_STEP"
