package xla

import (
	"errors"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// KVCache holds every layer's keys and values of the positions a Scorer has run,
// on the device, indexed by absolute position. Positions 0…Len-1 are valid; the
// rest (padding) are scratch. How the tensors are laid out is its cacheLayout: a
// Scorer's own caches are paged (pagedCache: a chunk step reads the pages it
// attends to and returns only the one or two pages it wrote, so the cache is never
// copied whole); the training pass reads the cache contiguously (contiguousCache;
// earlier chunks' K/V as constants: docs/design.md, "Long rollouts"), and
// Scorer.flatten makes that form once. ScoreHinted reuses a cache as the prefix of
// every hinted segment: a shared copy (cacheLayout.share) never modifies the
// prefix's tensors, only replaces them. A cache belongs to the model that filled
// it. Close frees the device memory; a cache is not safe for concurrent use.
type KVCache struct {
	model  *Model
	Len    int // valid positions, the tokens it has seen
	layout cacheLayout
}

// cacheLayout is how a KVCache holds its tensors on the device, one implementation
// per layout (ollama's kvcache.Cache): *pagedCache and *contiguousCache. The
// graph side of each is pagedNodes and contiguousNodes (kvcache_graph.go).
type cacheLayout interface {
	// capacity is the number of positions the tensors hold.
	capacity() int
	// tensors lists every K and V tensor, those shared with another cache included.
	tensors() []*tensors.Tensor
	// share returns a copy that refers to the same tensors and owns none of them.
	share() cacheLayout
	// close frees the tensors it owns.
	close() error
}

// Capacity is the number of positions the cache's tensors hold (pages × page
// size, or a bucket ≥ Len); 0 once closed.
func (c *KVCache) Capacity() int {
	if c.layout == nil {
		return 0
	}
	return c.layout.capacity()
}

// closed says whether the cache has been closed (or never filled).
func (c *KVCache) closed() bool { return c.layout == nil }

// Bytes is the device memory the cache holds (pages shared with another cache
// included).
func (c *KVCache) Bytes() int64 {
	var n int64
	if c.layout == nil {
		return 0
	}
	for _, t := range c.layout.tensors() {
		if t != nil {
			n += int64(t.Shape().Memory())
		}
	}
	return n
}

// Close releases the cache's tensors (a shared copy's own ones only). The cache is
// unusable afterwards.
func (c *KVCache) Close() error {
	if c == nil || c.layout == nil {
		return nil
	}
	err := c.layout.close()
	c.layout, c.Len = nil, 0
	return err
}

// contiguousCache is the contiguous layout: per layer a K and a V
// [capacity, batch, kv_heads, head_dim] tensor. A chunk step takes them all and
// returns them all, written (replace).
type contiguousCache struct {
	kv kvPair[*tensors.Tensor]
	// shared says the tensors are another cache's (a hinted segment's prefix):
	// they are neither donated nor freed, only replaced.
	shared bool
}

func (c *contiguousCache) capacity() int { return c.kv.K[0].Shape().Dimensions[0] }

func (c *contiguousCache) tensors() []*tensors.Tensor { return c.kv.all() }

func (c *contiguousCache) share() cacheLayout {
	return &contiguousCache{kv: kvPair[*tensors.Tensor]{K: append([]*tensors.Tensor(nil), c.kv.K...), V: append([]*tensors.Tensor(nil), c.kv.V...)}, shared: true}
}

func (c *contiguousCache) close() error {
	var errs []error
	if !c.shared {
		for _, t := range c.kv.all() {
			errs = append(errs, t.FinalizeAll())
		}
	}
	c.kv = kvPair[*tensors.Tensor]{}
	return errors.Join(errs...)
}

// args returns the tensors as a step's cache inputs (takeContiguous's order). Its
// own tensors are donated, so a backend can write the updated cache in place
// (XLA's DynamicUpdateSlice) instead of holding two copies; shared ones, or a
// buffer shared with the host (which cannot be donated), are passed as they are.
func (c *contiguousCache) args(backend backends.Backend) []any {
	if c.shared {
		return anys(c.kv.all())
	}
	var args []any
	for _, t := range c.kv.all() {
		args = append(args, donated(t, backend))
	}
	return args
}

// replace takes kv as the cache's tensors, freeing what is left of its own old
// ones (all of them, or what donation left).
func (c *contiguousCache) replace(kv kvPair[*tensors.Tensor]) {
	if !c.shared {
		finalize(c.kv.all())
	}
	c.kv, c.shared = kv, false
}

// donated returns t's buffer donated to the next execution where the backend allows
// (the executable then updates it in place), else t itself.
func donated(t *tensors.Tensor, backend backends.Backend) any {
	return donatedOn(t, backend, deviceOf(t))
}

// donatedOn is donated for an execution on device dev: a tensor only on the host is
// placed there (one on a device stays where it is).
func donatedOn(t *tensors.Tensor, backend backends.Backend, dev backends.DeviceNum) any {
	if _, err := t.Device(); err == nil {
		dev = deviceOf(t)
	}
	if !t.IsShared() {
		if d, err := graph.DonateTensorBuffer(t, backend, dev); err == nil {
			return d
		}
	}
	return t
}
