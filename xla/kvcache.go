package xla

import (
	"errors"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// KVCache holds every layer's keys and values of the positions a Scorer has run,
// on the device, indexed by absolute position. Positions 0…Len-1 are valid; the
// rest (padding) are scratch. A Scorer's own caches are paged: per layer, pages of
// Chunk positions ([Chunk, 1, kv_heads, head_dim] float32 for K and for V), so a
// chunk step reads the pages it attends to and returns only the one or two pages
// it wrote, and the cache is never copied whole (GoMLX v0.26 cannot update a
// donated buffer in place: a step that returned the whole cache held two of it).
// The training pass reads the cache contiguously (per layer a [Capacity, 1,
// kv_heads, head_dim] tensor, earlier chunks' K/V as constants: docs/design.md, "Long
// rollouts"); Scorer.flatten makes that form once. ScoreHinted reuses a cache as
// the prefix of every hinted segment: pages are never modified, only replaced, so
// a copy shares them. A cache belongs to the model that filled it. Close frees the
// device memory; a cache is not safe for concurrent use.
type KVCache struct {
	model    *Model
	Len      int // valid positions, the tokens it has seen
	Capacity int // positions the tensors hold (pages × page size, or a bucket ≥ Len)
	k, v     []*tensors.Tensor
	pages    *kvPages // the paged form; nil when contiguous (k, v)
}

// kvPages is the paged form of a KVCache: page i of a layer holds positions
// i·size … (i+1)·size−1.
type kvPages struct {
	size int
	k, v [][]*tensors.Tensor // [layer][page]
	// owned[i] says page i was made for this cache (else it is shared with the
	// cache it was copied from, which frees it).
	owned []bool
}

// count is the number of pages per layer.
func (p *kvPages) count() int { return len(p.owned) }

// set makes k and v page i of layer l, freeing the pages they replace if owned.
// The caller marks owned[i] once every layer's page i is set.
func (p *kvPages) set(l, i int, k, v *tensors.Tensor) {
	for i >= len(p.owned) {
		for j := range p.k {
			p.k[j], p.v[j] = append(p.k[j], nil), append(p.v[j], nil)
		}
		p.owned = append(p.owned, false)
	}
	if p.owned[i] {
		p.k[l][i].FinalizeAll()
		p.v[l][i].FinalizeAll()
	}
	p.k[l][i], p.v[l][i] = k, v
}

// shared returns a copy of p whose pages are all p's (none owned).
func (p *kvPages) shared() *kvPages {
	q := &kvPages{size: p.size, owned: make([]bool, len(p.owned))}
	for l := range p.k {
		q.k = append(q.k, slices.Clone(p.k[l]))
		q.v = append(q.v, slices.Clone(p.v[l]))
	}
	return q
}

// closed says whether the cache has been closed (or never filled).
func (c *KVCache) closed() bool { return c.k == nil && c.pages == nil }

// Bytes is the device memory the cache holds (pages shared with another cache
// included).
func (c *KVCache) Bytes() int64 {
	var n int64
	for _, t := range c.tensors() {
		if t != nil {
			n += int64(t.Shape().Memory())
		}
	}
	return n
}

// tensors lists every K and V tensor the cache refers to.
func (c *KVCache) tensors() []*tensors.Tensor {
	all := append(append([]*tensors.Tensor{}, c.k...), c.v...)
	if c.pages != nil {
		for l := range c.pages.k {
			all = append(append(all, c.pages.k[l]...), c.pages.v[l]...)
		}
	}
	return all
}

// Close releases the cache's tensors (a paged cache's own pages only). The cache
// is unusable afterwards.
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
	if p := c.pages; p != nil {
		for l := range p.k {
			for i, own := range p.owned {
				if own {
					errs = append(errs, p.k[l][i].FinalizeAll(), p.v[l][i].FinalizeAll())
				}
			}
		}
	}
	c.k, c.v, c.pages, c.Len, c.Capacity = nil, nil, nil, 0, 0
	return errors.Join(errs...)
}
