package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// The Batch's operations on its decodeCache (kvcache_decode.go).

// mergeCache writes c's recent slots into its main tensors, growing them first
// (doubling) when a row's positions would pass the capacity. Rows that stopped
// (b.rows[i].out.Reason set) do not set the capacity: their slots are dropped.
func (b *Batch) mergeCache() error {
	c, s := b.cache, b.s
	if c.used == 0 {
		return nil
	}
	need := 0
	for i, r := range b.rows {
		if r.out.Reason == "" {
			need = max(need, int(c.pos(i)))
		}
	}
	if need > c.capacity() {
		capacity := c.capacity()
		for capacity < need {
			capacity *= 2
		}
		if err := b.resizeCache(capacity); err != nil {
			return err
		}
	}
	args := []any{tensors.FromFlatDataAndDimensions(c.base, len(c.base)), tensors.FromScalar(int32(c.used))}
	out, err := s.dec.merge.Exec(append(args, anys(c.tensors())...)...)
	if err != nil {
		return fmt.Errorf("merge kv cache: %w", err)
	}
	finalize(c.main.all())
	c.main = takeKV(listOf(out), len(c.main.K))
	for i := range c.base {
		c.base[i] += int32(c.used)
	}
	c.used = 0
	return nil
}

// resizeCache cuts or pads the cache's main tensors to capacity positions; the
// caller keeps every row's positions below it.
func (b *Batch) resizeCache(capacity int) error {
	c := b.cache
	out, err := b.s.dec.resize.Exec(append([]any{lengthArg(capacity)}, anys(c.main.all())...)...)
	if err != nil {
		return fmt.Errorf("resize kv cache to %d: %w", capacity, err)
	}
	finalize(c.main.all())
	c.main = takeKV(listOf(out), len(c.main.K))
	return nil
}

// adoptCache returns a contiguous cache's rows as a decodeCache of capacity
// positions whose rows hold positions < base (one per row), and frees it.
func (s *Sampler) adoptCache(one *contiguousCache, capacity int, base []int32) (*decodeCache, error) {
	out, err := s.dec.adopt.Exec(append([]any{lengthArg(capacity)}, anys(one.kv.all())...)...)
	one.close()
	if err != nil {
		return nil, fmt.Errorf("adopt kv cache: %w", err)
	}
	nl := s.model.Config.NumHiddenLayers
	l := listOf(out)
	return &decodeCache{main: takeKV(l, nl), recent: takeKV(l, nl), base: base}, nil
}

// keepRows cuts the cache to the rows keep (indices into its rows, in order).
func (b *Batch) keepRows(keep []int32) error {
	c := b.cache
	out, err := b.s.dec.rows.Exec(append([]any{tensors.FromFlatDataAndDimensions(keep, len(keep), 1)}, anys(c.tensors())...)...)
	if err != nil {
		return fmt.Errorf("keep kv cache rows: %w", err)
	}
	finalize(c.tensors())
	nl := len(c.main.K)
	l := listOf(out)
	c.main, c.recent = takeKV(l, nl), takeKV(l, nl)
	base := make([]int32, len(keep))
	for j, i := range keep {
		base[j] = c.base[i]
	}
	c.base = base
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
