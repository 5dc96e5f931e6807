package teacher

import (
	"fmt"
	"sync"
	"time"
)

// BreakerConfig configures the circuit breaker in front of the LLM server.
type BreakerConfig struct {
	// Failures is the number of consecutive failed requests (timeouts, 429, 5xx,
	// resets, malformed replies) that opens the breaker.
	Failures int `yaml:"failures"`
	// Cooldown is how long the breaker stays open before it lets one probe through
	// (half-open); a successful probe closes it, a failed one opens it again.
	Cooldown time.Duration `yaml:"cooldown"`
}

// Validate reports the first bad field, named by its YAML path under prefix.
func (c BreakerConfig) Validate(prefix string) error {
	switch {
	case c.Failures < 1:
		return fmt.Errorf("%sfailures: must be ≥ 1, got %d", prefix, c.Failures)
	case c.Cooldown <= 0:
		return fmt.Errorf("%scooldown: must be > 0, got %s", prefix, c.Cooldown)
	}
	return nil
}

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

func (s breakerState) String() string {
	return [...]string{"closed", "open", "half_open"}[s]
}

// breaker is a consecutive-failure circuit breaker. While open it refuses every
// request without touching the network, so a dead server costs nothing per hint.
type breaker struct {
	cfg      BreakerConfig
	now      func() time.Time
	onChange func(from, to breakerState)

	mu       sync.Mutex
	state    breakerState
	fails    int
	openedAt time.Time
	probing  bool // half-open: the one probe is in flight
}

func newBreaker(cfg BreakerConfig, onChange func(from, to breakerState)) *breaker {
	return &breaker{cfg: cfg, now: time.Now, onChange: onChange}
}

// allow reports whether a request may go out now. In half-open state only one probe
// is allowed at a time.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case breakerOpen:
		if b.now().Sub(b.openedAt) < b.cfg.Cooldown {
			return false
		}
		b.set(breakerHalfOpen)
		b.probing = true
		return true
	case breakerHalfOpen:
		if b.probing {
			return false
		}
		b.probing = true
		return true
	}
	return true
}

// record reports the outcome of a request that allow let through. ok means the server
// answered (even if the answer was not a usable hint).
func (b *breaker) record(ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.probing = false
	if ok {
		b.fails = 0
		if b.state != breakerClosed {
			b.set(breakerClosed)
		}
		return
	}
	b.fails++
	if b.state == breakerHalfOpen || b.fails >= b.cfg.Failures {
		b.openedAt = b.now()
		if b.state != breakerOpen {
			b.set(breakerOpen)
		}
	}
}

// cancel gives back a half-open probe slot whose request never reached the server
// (the caller's context ended).
func (b *breaker) cancel() {
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *breaker) current() breakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *breaker) set(to breakerState) {
	from := b.state
	b.state = to
	if b.onChange != nil {
		b.onChange(from, to)
	}
}
