package xla

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// A Sampler's cache is contiguous ([capacity, batch, kv, hd] per layer), each row
// at its own position while decoding (contiguousNodes' writeRows); prefill writes
// every row's prompt at positions 0… in chunks.

// newCache returns a zeroed contiguous cache for b rows of capacity positions.
func (s *Sampler) newCache(b, capacity int) *contiguousCache {
	cfg := s.model.Config
	c := &contiguousCache{}
	for range cfg.NumHiddenLayers {
		c.kv.K = append(c.kv.K, tensors.FromShape(shapes.Make(s.model.cacheDType(), capacity, b, cfg.NumKeyValueHeads, cfg.HeadDim)))
		c.kv.V = append(c.kv.V, tensors.FromShape(shapes.Make(s.model.cacheDType(), capacity, b, cfg.NumKeyValueHeads, cfg.HeadDim)))
	}
	return c
}

// runPrefill writes the keys and values of every prompt but its last token into c
// (it stops early once every row is gone),
// all rows at positions 0…, right-padded with token 0: a padded position of row r
// lies at or after its last prompt token, which decoding overwrites before any
// query can see it.
func (s *Sampler) runPrefill(ctx context.Context, c *contiguousCache, prompts [][]int32, allGone func() bool) error {
	b, n := len(prompts), 0
	for _, p := range prompts {
		n = max(n, len(p)-1)
	}
	heads := s.model.Config.NumAttentionHeads
	for off := 0; off < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		if allGone() { // decode marks every row gone at once
			return nil
		}
		// The chunk: a power of two ≤ Chunk that holds what is left (≥ minChunk),
		// halved while one chunk's attention scores exceed the default budget.
		size := minChunk
		for size < s.chunk && size < n-off {
			size *= 2
		}
		for size/2 >= minChunk && b*heads*size*c.capacity() > DefaultAttentionScores {
			size /= 2
		}
		tok := make([]int32, b*size)
		for r, p := range prompts {
			if off < len(p)-1 {
				copy(tok[r*size:(r+1)*size], p[off:len(p)-1])
			}
		}
		args := []any{tensors.FromFlatDataAndDimensions(tok, b, size), tensors.FromScalar(int32(off))}
		out, err := s.prefill.Exec(append(args, c.args(s.backend)...)...)
		if err != nil {
			return fmt.Errorf("prefill at %d: %w", off, err)
		}
		r := listOf(out)
		r.next().FinalizeAll()
		c.replace(takeKV(r, len(c.kv.K)))
		off += size
	}
	return nil
}

// decode feeds every row's last prompt token, then each sampled token, one step at
// a time, until every row has stopped.
func (s *Sampler) decode(ctx context.Context, c *contiguousCache, prompts [][]int32, opts SampleOptions) ([]Sample, error) {
	b, vocab, maxPos := len(prompts), s.model.Config.VocabSize, s.model.Config.MaxPositionEmbeddings
	out := make([]Sample, b)
	cur, pos := make([]int32, b), make([]int32, b)
	rngs := make([]*rand.Rand, b)
	for r, p := range prompts {
		cur[r], pos[r] = p[len(p)-1], int32(len(p)-1)
		rngs[r] = opts.seedOf(r)
	}
	rows := make([]SampleOptions, b)
	hist := make([]*history, b)
	for r := range rows {
		rows[r] = opts.row(r)
		hist[r] = newHistory(prompts[r], rows[r])
	}
	var scratch pickScratch
	for step, live := 0, b; live > 0; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for r := range out {
			if out[r].Reason == "" && gone(rows[r].Gone) {
				out[r].Reason = StopGone
				live--
			}
		}
		if live == 0 {
			break
		}
		if need := int(slices.Max(pos)) + 1; need > c.capacity() {
			if err := s.growCache(c, need); err != nil {
				return nil, err
			}
		}
		args := []any{tensors.FromFlatDataAndDimensions(slices.Clone(cur), b), tensors.FromFlatDataAndDimensions(slices.Clone(pos), b)}
		res, err := s.step.Exec(append(args, c.args(s.backend)...)...)
		if err != nil {
			return nil, fmt.Errorf("decode at step %d: %w", step, err)
		}
		r := listOf(res)
		lt := r.next()
		logits := tensors.MustCopyFlatData[float32](lt)
		lt.FinalizeAll()
		c.replace(takeKV(r, len(c.kv.K)))
		for r := range out {
			o := &out[r]
			if o.Reason != "" {
				continue
			}
			raw := logits[r*vocab : (r+1)*vocab]
			adj := adjust(raw, rows[r], hist[r], &scratch)
			tok, lp, plp := pick(adj, rows[r], rngs[r], &scratch)
			if &adj[0] != &raw[0] { // the policy's log-prob is the unadjusted model's
				plp = float64(raw[tok]) - logSumExp(raw, 1, float64(slices.Max(raw)))
			}
			hist[r].add(tok)
			o.Tokens = append(o.Tokens, tok)
			o.LogProbs = append(o.LogProbs, float32(lp))
			var top []TokenLogProb
			if rows[r].TopLogProbs > 0 {
				top = scratch.top(rows[r].TopLogProbs)
				o.Top = append(o.Top, top)
			}
			o.PolicyLogProbs = append(o.PolicyLogProbs, float32(plp))
			if opts.OnToken != nil {
				opts.OnToken(r, tok, float32(lp), top)
			}
			switch {
			case slices.Contains(rows[r].Stop, tok):
				o.Reason = StopToken
			case len(o.Tokens) == rows[r].MaxNew:
				o.Reason = StopLength
			case int(pos[r])+2 >= maxPos: // the token just sampled sits at pos+1, the last position
				o.Reason = StopContext
			default:
				cur[r], pos[r] = tok, pos[r]+1
				continue
			}
			live--
		}
	}
	return out, nil
}

// growCache doubles c's capacity until it holds n positions.
func (s *Sampler) growCache(c *contiguousCache, n int) error {
	capacity := c.capacity()
	for capacity < n {
		capacity *= 2
	}
	out, err := s.grow.Exec(append([]any{lengthArg(capacity)}, anys(c.kv.all())...)...)
	if err != nil {
		return fmt.Errorf("grow kv cache to %d: %w", capacity, err)
	}
	c.replace(takeKV(listOf(out), len(c.kv.K)))
	return nil
}

// gone reports whether done is closed (nil: never).
func gone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
