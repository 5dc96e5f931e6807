package xla

import (
	"errors"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// KVCache holds every layer's keys and values of the positions a Scorer has run,
// on the device: per layer a [Capacity, 1, kv_heads, head_dim] float32 tensor for
// K and one for V, indexed by absolute position. Positions 0…Len-1 are valid; the
// rest (bucket padding) are scratch. The training pass reads earlier chunks' K/V
// from it as constants (DESIGN.md, "Long rollouts"); ScoreHinted reuses it as the
// prefix of every hinted segment. A cache belongs to the model that filled it.
// Close frees the device memory; a cache is not safe for concurrent use.
type KVCache struct {
	model    *Model
	Len      int // valid positions, the tokens it has seen
	Capacity int // positions the tensors hold (a bucket ≥ Len)
	k, v     []*tensors.Tensor
}

// Bytes is the device memory the cache holds.
func (c *KVCache) Bytes() int64 {
	var n int64
	for _, t := range append(append([]*tensors.Tensor{}, c.k...), c.v...) {
		if t != nil {
			n += int64(t.Shape().Memory())
		}
	}
	return n
}

// Close releases the cache's tensors. The cache is unusable afterwards.
func (c *KVCache) Close() error {
	if c == nil {
		return nil
	}
	var errs []error
	for _, t := range append(c.k, c.v...) {
		if t != nil {
			errs = append(errs, t.FinalizeAll())
		}
	}
	c.k, c.v, c.Len, c.Capacity = nil, nil, 0, 0
	return errors.Join(errs...)
}
