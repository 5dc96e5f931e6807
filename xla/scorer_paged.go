package xla

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Scoring against a paged KV cache (pagedCache; docs/performance.md "Long rollouts: causal
// attention cost"). A chunk at positions pos…pos+n−1 (n ≤ the page size P) attends
// to itself and to the pages of its past span (spanFor(pos): 1…8 pages, then
// 5…8 × 2^k, in blocks of ≤ MaxBlockPages pages), and returns the page holding pos
// and the one after it with its keys and values written. So a step's inputs are
// pages already on the device, its outputs two pages per layer, and no tensor of
// the cache's size is made per chunk: memory apart from the cache is the chunk's
// activations and one block's scores, whatever the rollout's length.

// runPaged is run for a paged cache.
func (s *Scorer) runPaged(ctx context.Context, p *pagedCache, seq []int32, start int, temp float64, emit func(i int, lp float32), sink *viewSink) error {
	if s.layers != nil && sink == nil && s.device == 0 {
		return s.runLayers(ctx, p, seq, start, temp, emit)
	}
	exec, label := s.paged, "paged"
	if sink != nil {
		exec, label = sink.paged, sink.label+" paged"
	}
	nl := s.model.Config.NumHiddenLayers
	return s.pagedChunks(ctx, p, seq, start, func(off, pos, n int, past kvSpan, zero *tensors.Tensor) error {
		t0 := time.Now()
		args := append(append(append(chunkArgs(seq, off, n, pos), tempArg(temp)), sink.inputs(off, n)...), p.stepArgs(pos, past, zero)...)
		s.stats.CopySeconds += time.Since(t0).Seconds()
		out, err := s.timedExec(exec, fmt.Sprintf("%s %d span %d×%d", label, n, past.Blocks, past.Block), false, args)
		if err != nil {
			return fmt.Errorf("score chunk at %d: %w", pos, err)
		}
		r := listOf(out)
		s.emitChunk(r.next(), off, n, len(seq), emit)
		sink.consume(r, off, n)
		p.write(takeWritten(r, nl), pos, n)
		return nil
	})
}

// pagedChunks runs chunk on each chunk of seq against p, front to back: at off in
// seq, its first position pos (start + off), its length n (chunkFor against the
// past span's block) and the span past of the pages before it, counted (count)
// before it runs; zero is the Scorer's zero page (pagedCache.stepArgs).
func (s *Scorer) pagedChunks(ctx context.Context, p *pagedCache, seq []int32, start int, chunk func(off, pos, n int, past kvSpan, zero *tensors.Tensor) error) error {
	zero, err := s.zeroPageTensor()
	if err != nil {
		return err
	}
	for off := 0; off < len(seq); {
		if err := ctx.Err(); err != nil {
			return err
		}
		pos := start + off
		past := spanFor(pos, p.size)
		n := s.chunkFor(len(seq)-off, max(past.Block, p.size))
		s.count(n, -1, n+past.Len())
		if err := chunk(off, pos, n, past, zero); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// zeroPageTensor returns the Scorer's page of zeros, making it on the device the
// first time.
func (s *Scorer) zeroPageTensor() (*tensors.Tensor, error) {
	if s.zeroPage != nil {
		return s.zeroPage, nil
	}
	out, err := s.timedExec(s.caches.zeros, fmt.Sprintf("zeros %d", s.chunk), true, []any{lengthArg(s.chunk)})
	if err != nil {
		return nil, fmt.Errorf("kv cache zero page: %w", err)
	}
	finalize(out[1:])
	s.zeroPage = out[0]
	return s.zeroPage, nil
}

// flatten turns a paged cache into the contiguous form the training pass reads
// (per layer a [Chunk·2^k ≥ Len] tensor for K and one for V; pages not written are
// zeros), freeing its own pages, and returns that form. While it runs the cache
// exists twice. A contiguous cache is left as it is.
func (s *Scorer) flatten(c *KVCache) (*contiguousCache, error) {
	var p *pagedCache
	switch l := c.layout.(type) {
	case *contiguousCache:
		return l, nil
	case *pagedCache:
		p = l
	default:
		return nil, errors.New("flatten kv cache: closed")
	}
	zero, err := s.zeroPageTensor()
	if err != nil {
		return nil, err
	}
	capacity := s.capacityFor(max(c.Len, p.capacity(), 1))
	var args []any
	for _, layers := range [][][]*tensors.Tensor{p.k, p.v} {
		for _, pages := range layers {
			for i := range capacity / p.size {
				args = append(args, page(pages, i, zero))
			}
		}
	}
	out, err := s.timedExec(s.caches.flat, fmt.Sprintf("flatten %d", capacity), true, args)
	if err != nil {
		return nil, fmt.Errorf("flatten kv cache to %d positions: %w", capacity, err)
	}
	flat := &contiguousCache{kv: takeKV(listOf(out), s.model.Config.NumHiddenLayers)}
	p.close()
	c.layout = flat
	return flat, nil
}
