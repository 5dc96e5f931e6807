package xla

import (
	"errors"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// pagedCache is the paged layout of a KVCache, a Scorer's own: page i of a layer
// holds positions i·size … (i+1)·size−1 ([size, 1, kv_heads, head_dim] float32 for
// K and for V). GoMLX v0.26 cannot update a donated buffer in place, so a step that
// returned the whole cache held two of it; a paged step returns the pages it wrote.
type pagedCache struct {
	size int
	k, v [][]*tensors.Tensor // [layer][page]
	// owned[i] says page i was made for this cache (else it is shared with the
	// cache it was copied from, which frees it).
	owned []bool
}

// newPagedCache is an empty paged cache of nl layers, pages of size positions.
func newPagedCache(nl, size int) *pagedCache {
	return &pagedCache{size: size, k: make([][]*tensors.Tensor, nl), v: make([][]*tensors.Tensor, nl)}
}

// count is the number of pages per layer.
func (p *pagedCache) count() int { return len(p.owned) }

func (p *pagedCache) capacity() int { return p.count() * p.size }

func (p *pagedCache) tensors() []*tensors.Tensor {
	var all []*tensors.Tensor
	for l := range p.k {
		all = append(append(all, p.k[l]...), p.v[l]...)
	}
	return all
}

// share returns a copy of p whose pages are all p's (none owned).
func (p *pagedCache) share() cacheLayout {
	q := &pagedCache{size: p.size, owned: make([]bool, len(p.owned))}
	for l := range p.k {
		q.k = append(q.k, slices.Clone(p.k[l]))
		q.v = append(q.v, slices.Clone(p.v[l]))
	}
	return q
}

func (p *pagedCache) close() error {
	var errs []error
	for l := range p.k {
		for i, own := range p.owned {
			if own {
				errs = append(errs, p.k[l][i].FinalizeAll(), p.v[l][i].FinalizeAll())
			}
		}
	}
	p.k, p.v, p.owned = nil, nil, nil
	return errors.Join(errs...)
}

// page returns page i of pages, or zero where it is not written yet.
func page(pages []*tensors.Tensor, i int, zero *tensors.Tensor) *tensors.Tensor {
	if i < len(pages) && pages[i] != nil {
		return pages[i]
	}
	return zero
}

// stepArgs are the paged step's cache inputs for a chunk at pos whose past is span
// (takePaged's order): the chunk's offset in its head page, pages per block, every
// layer's first span.Len()/size pages of K, then of V, and every layer's head page
// of K, then of V. zero stands for pages not written yet.
func (p *pagedCache) stepArgs(pos int, span kvSpan, zero *tensors.Tensor) []any {
	head, np := pos/p.size, span.Len()/p.size
	args := []any{tensors.FromScalar(int32(pos - head*p.size)), lengthArg(max(span.Block/p.size, 1))}
	for _, layers := range [][][]*tensors.Tensor{p.k, p.v} {
		for _, pages := range layers {
			for i := range np {
				args = append(args, page(pages, i, zero))
			}
		}
	}
	for _, layers := range [][][]*tensors.Tensor{p.k, p.v} {
		for _, pages := range layers {
			args = append(args, page(pages, head, zero))
		}
	}
	return args
}

// write takes a paged step's written pages (takeWritten) for a chunk of n
// positions at pos: the head page, and the page after it if the chunk reaches
// into it (else that one is freed).
func (p *pagedCache) write(written kvPair[[2]*tensors.Tensor], pos, n int) {
	head := pos / p.size
	spill := pos-head*p.size+n > p.size // the chunk ends in the page after head
	for l := range written.K {
		k, v := written.K[l], written.V[l]
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
}

// set makes k and v page i of layer l, freeing the pages they replace if owned.
// The caller marks owned[i] once every layer's page i is set.
func (p *pagedCache) set(l, i int, k, v *tensors.Tensor) {
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
