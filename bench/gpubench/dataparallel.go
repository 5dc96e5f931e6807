package gpubench

import (
	"context"
	"fmt"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// stageDataParallel times whole training steps (truncated backprop, AdamW, f32) of
// one batch on one device and on every device of the backend (train.devices: all):
// tokens/s each, the speed-up and its efficiency (speed-up over the device count).
// The batch is 2 rollouts a device of DataParallelT tokens, so both runs do the same
// work and each device gets the same share. With one device there is nothing to
// scale: the stage records that and stops.
func (b *bench) stageDataParallel(ctx context.Context) error {
	n := b.backend.NumDevices()
	if n < 2 {
		b.record("data parallel skipped", map[string]any{"devices": n, "reason": "the backend has one device: no scaling to measure"})
		return nil
	}
	dir, mc, err := b.model(b.opts.DataParallel)
	if err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	T := b.opts.DataParallelT
	batch := make([]credit.Sequence, 2*n)
	for i := range batch {
		batch[i] = trainRollout(benchutil.Tokens(T, mc.VocabSize, uint64(20+i), 8))
		batch[i].ID = fmt.Sprintf("dp-%d", i)
	}
	tps := map[int]float64{}
	for _, devices := range []int{1, n} {
		if err := ctx.Err(); err != nil {
			return err
		}
		opts := trainerOptions(0, xla.BackpropTruncated)
		opts.Devices = devices
		tr, err := xla.NewTrainer(b.backend, m, opts)
		if err != nil {
			return fmt.Errorf("%d devices: %w", devices, err)
		}
		sec, first, err := bestOf(ctx, b.opts.Reps, func() error {
			met, err := tr.Step(ctx, batch)
			if err == nil && !met.Updated {
				err = fmt.Errorf("no update: the time would not include a gradient pass")
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%d devices: train step: %w", devices, err)
		}
		tokens := float64(len(batch) * T)
		tps[devices] = tokens / sec
		f := map[string]any{"preset": b.opts.DataParallel, "T": T, "rollouts": len(batch), "devices": devices,
			"tokens_per_s": tps[devices], "seconds": sec, "first_seconds_with_compile": first}
		b.mfu(f, float64(len(batch))*TrainFLOPs(mc, T), sec)
		for k, v := range b.mem.peaks() {
			f[k] = v
		}
		b.record("hindsight data-parallel step", f)
	}
	b.record("data parallel scaling", map[string]any{"preset": b.opts.DataParallel, "T": T, "devices": n,
		"speedup": tps[n] / tps[1], "efficiency": tps[n] / tps[1] / float64(n)})
	return nil
}
