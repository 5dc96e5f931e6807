package xla

import (
	"context"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Scoring against a paged KV cache (KVCache.pages; docs/performance.md "Long rollouts: causal
// attention cost"). A chunk at positions pos…pos+n−1 (n ≤ the page size P) attends
// to itself and to the pages of its past span (spanFor(pos): 1…8 pages, then
// 5…8 × 2^k, in blocks of ≤ MaxBlockPages pages), and returns the page holding pos
// and the one after it with its keys and values written. So a step's inputs are
// pages already on the device, its outputs two pages per layer, and no tensor of
// the cache's size is made per chunk: memory apart from the cache is the chunk's
// activations and one block's scores, whatever the rollout's length.

// runPaged is run for a paged cache.
func (s *Scorer) runPaged(ctx context.Context, c *KVCache, seq []int32, start int, emit func(i int, lp float32)) error {
	p := c.pages
	size, nl := p.size, s.model.Config.NumHiddenLayers
	zero, err := s.zeroPageTensor()
	if err != nil {
		return err
	}
	page := func(pages []*tensors.Tensor, i int) *tensors.Tensor {
		if i < len(pages) && pages[i] != nil {
			return pages[i]
		}
		return zero
	}
	s.stats.Passes++
	s.stats.Tokens += len(seq)
	for off := 0; off < len(seq); {
		if err := ctx.Err(); err != nil {
			return err
		}
		pos := start + off
		past := spanFor(pos, size)
		n := s.chunkFor(len(seq)-off, max(past.Block, size))
		head, np, perBlock := pos/size, past.Len()/size, max(past.Block/size, 1)
		t0 := time.Now()
		args := append(chunkArgs(seq, off, n, pos), tensors.FromScalar(int32(pos-head*size)), make([]int8, perBlock))
		for _, layers := range [][][]*tensors.Tensor{p.k, p.v} {
			for l := range nl {
				for i := range np {
					args = append(args, page(layers[l], i))
				}
			}
		}
		for _, layers := range [][][]*tensors.Tensor{p.k, p.v} {
			for l := range nl {
				args = append(args, page(layers[l], head))
			}
		}
		s.count(n, -1, n+past.Len())
		s.stats.CopySeconds += time.Since(t0).Seconds()
		out, err := s.timedExec(s.paged, fmt.Sprintf("paged %d span %d×%d", n, past.Blocks, past.Block), false, args)
		if err != nil {
			return fmt.Errorf("score chunk at %d: %w", pos, err)
		}
		s.emitChunk(out[0], off, n, len(seq), emit)
		spill := pos-head*size+n > size // the chunk ends in the page after head
		for l := range nl {
			k, v := out[1+2*l:3+2*l], out[1+2*nl+2*l:3+2*nl+2*l]
			p.set(l, head, k[0], v[0])
			if spill {
				p.set(l, head+1, k[1], v[1])
			} else {
				k[1].FinalizeAll()
				v[1].FinalizeAll()
			}
		}
		p.owned[head] = true
		if spill {
			p.owned[head+1] = true
		}
		off += n
	}
	c.Len = start + len(seq)
	c.Capacity = p.count() * size
	return nil
}

// zeroPageTensor returns the Scorer's page of zeros, making it on the device the
// first time.
func (s *Scorer) zeroPageTensor() (*tensors.Tensor, error) {
	if s.zeroPage != nil {
		return s.zeroPage, nil
	}
	out, err := s.timedExec(s.zeros, fmt.Sprintf("zeros %d", s.chunk), true, []any{make([]float32, s.chunk)})
	if err != nil {
		return nil, fmt.Errorf("kv cache zero page: %w", err)
	}
	for _, t := range out[1:] {
		t.FinalizeAll()
	}
	s.zeroPage = out[0]
	return s.zeroPage, nil
}

// flatten turns a paged cache into the contiguous form the training pass reads
// (per layer a [Chunk·2^k ≥ Len] tensor for K and one for V; pages not written are
// zeros), freeing its own pages. While it runs the cache exists twice. A
// contiguous cache is left as it is.
func (s *Scorer) flatten(c *KVCache) error {
	p := c.pages
	if p == nil {
		return nil
	}
	zero, err := s.zeroPageTensor()
	if err != nil {
		return err
	}
	capacity := s.capacityFor(max(c.Len, p.count()*p.size, 1))
	var args []any
	for _, layers := range [][][]*tensors.Tensor{p.k, p.v} {
		for _, pages := range layers {
			for i := range capacity / p.size {
				if i < len(pages) && pages[i] != nil {
					args = append(args, pages[i])
				} else {
					args = append(args, zero)
				}
			}
		}
	}
	out, err := s.timedExec(s.flat, fmt.Sprintf("flatten %d", capacity), true, args)
	if err != nil {
		return fmt.Errorf("flatten kv cache to %d positions: %w", capacity, err)
	}
	n := c.Len
	c.Close()
	nl := s.model.Config.NumHiddenLayers
	c.k, c.v, c.Len, c.Capacity = out[:nl], out[nl:], n, capacity
	return nil
}

// newFlattenExec returns the executable that concatenates every layer's K pages,
// then V pages (as many per layer) into one tensor each.
func newFlattenExec(backend backends.Backend, m *Model) (*mlctx.Exec, error) {
	layers := 2 * m.Config.NumHiddenLayers
	e, err := mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		np := len(in) / layers
		out := make([]*Node, layers)
		for i := range out {
			out[i] = Concatenate(in[i*np:(i+1)*np], 0)
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("kv cache flatten: %w", err)
	}
	e.SetMaxCache(-1)
	return e, nil
}
