package gpubench

import (
	"context"
	"fmt"

	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// stageGenerate times xla.Sampler: per batch size, GenNew new tokens per row
// (temperature 1, no stop token) after a 64-token prompt; a warm-up call compiles
// first. tokens/s counts every row's new tokens.
func (b *bench) stageGenerate(ctx context.Context) error {
	dir, mc, err := b.model(b.opts.GenPreset)
	if err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	s, err := xla.NewSampler(b.backend, m, 0)
	if err != nil {
		return err
	}
	for _, batch := range b.opts.GenBatch {
		prompts := make([][]int32, batch)
		for i := range prompts {
			prompts[i] = benchutil.Tokens(64, mc.VocabSize, 9, uint64(i))
		}
		opts := xla.SampleOptions{MaxNew: b.opts.GenNew, Temperature: 1, Seed: 1}
		var n int
		b.mem.reset()
		sec, first, err := bestOf(ctx, b.opts.Reps, func() error {
			out, err := s.Generate(ctx, prompts, opts)
			n = 0
			for _, o := range out {
				n += len(o.Tokens)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("generate batch %d: %w", batch, err)
		}
		f := map[string]any{"preset": b.opts.GenPreset, "batch": batch, "prompt": 64, "new_tokens": n,
			"tokens_per_s": float64(n) / sec, "seconds": sec, "first_seconds_with_compile": first,
			"ms_per_step": sec / float64(b.opts.GenNew) * 1000}
		for k, v := range b.mem.peaks() {
			f[k] = v
		}
		b.record("hindsight generate", f)
	}
	return nil
}
