package xla

import (
	"fmt"
)

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
