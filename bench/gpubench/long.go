package gpubench

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// measuredPeak is one long-stage measurement for the memory model's check.
type measuredPeak struct {
	what      string
	T, chunk  int
	train     bool
	backprop  xla.Backprop
	rss, gpu  int64 // peak bytes (gpu −1: not measured)
	baseline  int64 // RSS before the measurement
	effective int   // the chunk the scorer or trainer ran
}

// stageLong scores one LongT-token rollout, then runs one training step on it per
// (chunk, backprop) — truncated at every chunk first, then exact at each — and
// records time, tokens/s and peak memory of each; the fastest truncated chunk is
// the best chunk. On the GPU each is one run, compile included (one 128k step per
// setting is what the budget holds); in the CPU rehearsal a first run compiles, so
// that time and peak RSS are the pass's own (compiled_before).
func (b *bench) stageLong(ctx context.Context) error {
	dir, mc, err := b.model(b.opts.Long)
	if err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	T := b.opts.LongT
	tokens := benchutil.Tokens(T, mc.VocabSize, 11, 12)
	s, err := xla.NewScorer(b.backend, m, xla.ScorerOptions{})
	if err != nil {
		return err
	}
	score := func() error {
		_, c, err := s.Score(ctx, tokens)
		if err == nil {
			c.Close()
		}
		return err
	}
	if b.opts.CPU { // compile first, so that the peak is the pass's, not the compiler's
		if err := score(); err != nil {
			return fmt.Errorf("score %d tokens: %w", T, err)
		}
	}
	_, base := must(rssNow())
	b.mem.reset()
	t0 := time.Now()
	if err := score(); err != nil {
		return fmt.Errorf("score %d tokens: %w", T, err)
	}
	sec := time.Since(t0).Seconds()
	f := map[string]any{"preset": b.opts.Long, "T": T, "seconds": sec, "compiled_before": b.opts.CPU,
		"tokens_per_s": float64(T) / sec, "chunk": s.Chunk()}
	b.addPeaks(f, measuredPeak{what: "score", T: T, chunk: s.Chunk(), baseline: base})
	b.record("long score", f)

	best, bestChunk := math.Inf(1), 0
	for _, mode := range []xla.Backprop{xla.BackpropTruncated, xla.BackpropExact} {
		for _, chunk := range b.opts.LongChunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			tr, err := xla.NewTrainer(b.backend, m, trainerOptions(chunk, mode))
			if err != nil {
				return err
			}
			var met xla.Metrics
			step := func() error {
				met, err = tr.Step(ctx, []credit.Sequence{trainRollout(tokens)})
				return err
			}
			if b.opts.CPU {
				err = step()
			}
			_, base := must(rssNow())
			b.mem.reset()
			if err == nil {
				err = step()
			}
			if err == nil && (!met.Updated || met.Tokens == 0) {
				err = fmt.Errorf("no update (%d gradient tokens)", met.Tokens)
			}
			if err != nil {
				b.record("long train failed", map[string]any{"T": T, "chunk": chunk, "backprop": string(mode), "error": err.Error()})
				continue
			}
			took := met.Took.Seconds()
			f := map[string]any{"preset": b.opts.Long, "T": T, "chunk": chunk, "backprop": string(mode),
				"seconds": took, "compiled_before": b.opts.CPU, "tokens_per_s": float64(T) / took, "score_seconds": met.ScoreTook.Seconds(),
				"updated": met.Updated, "gradient_tokens": met.Tokens}
			b.addPeaks(f, measuredPeak{what: "train", T: T, chunk: chunk, train: true, backprop: mode, baseline: base})
			b.record("long train step", f)
			if mode == xla.BackpropTruncated && took < best {
				best, bestChunk = took, chunk
			}
		}
	}
	if bestChunk > 0 {
		b.record("long best chunk", map[string]any{"T": T, "backprop": "truncated", "chunk": bestChunk, "seconds": best})
	}
	return nil
}

// addPeaks adds the memory watch's peaks to f and keeps them for the memory stage.
func (b *bench) addPeaks(f map[string]any, mp measuredPeak) {
	p := b.mem.peaks()
	for k, v := range p {
		f[k] = v
	}
	mp.rss, mp.gpu = -1, -1
	if v, ok := p["peak_rss_bytes"].(int64); ok {
		mp.rss = v
	}
	if v, ok := p["gpu_peak_bytes"].(int64); ok {
		mp.gpu = v
	}
	f["baseline_rss_bytes"] = mp.baseline
	b.measured = append(b.measured, mp)
}

func must(hwm, rss int64, err error) (int64, int64) {
	if err != nil {
		return -1, -1
	}
	return hwm, rss
}
