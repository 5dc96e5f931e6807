package daemon

import (
	"context"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
)

// pauser holds the two reasons to pause: an operator's (hindsight pause, until
// resume) and a full disk (until a retried write succeeds). The ingest loop waits on
// it before each claim, the device loop before taking the next rollout and before
// an idle step; checkpoints wait only for the disk. Every change closes changed, so
// waiters select on it beside their context.
type pauser struct {
	mu      sync.Mutex
	changed chan struct{}

	operator      bool
	by, reason    string
	since         time.Time
	diskFull      bool
	diskPath      string
	diskOp        string
	diskSince     time.Time
	diskNextRetry time.Time

	onChange func() // publishes a fresh status; called without mu held
}

func newPauser() *pauser { return &pauser{changed: make(chan struct{})} }

// notify wakes the waiters and publishes; p.mu is held and released here.
func (p *pauser) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
	f := p.onChange
	p.mu.Unlock()
	if f != nil {
		f()
	}
}

// pause starts (or renews) an operator's pause; since stays from the first call.
func (p *pauser) pause(by, reason string) *hindsightv1.PauseState {
	p.mu.Lock()
	if !p.operator {
		p.operator, p.since = true, time.Now()
	}
	p.by, p.reason = by, reason
	st := p.protoLocked()
	p.notifyLocked()
	return st
}

// resume ends an operator's pause; it reports whether one was in force.
func (p *pauser) resume() (was bool, st *hindsightv1.PauseState) {
	p.mu.Lock()
	was = p.operator
	p.operator, p.by, p.reason, p.since = false, "", "", time.Time{}
	st = p.protoLocked()
	p.notifyLocked()
	return was, st
}

// setDiskFull records a write that failed with a full disk; next is the next retry.
func (p *pauser) setDiskFull(op, path string, next time.Time) {
	p.mu.Lock()
	if !p.diskFull {
		p.diskFull, p.diskSince = true, time.Now()
	}
	p.diskOp, p.diskPath, p.diskNextRetry = op, path, next
	p.notifyLocked()
}

// clearDiskFull ends the disk-full pause after a write succeeded; it reports
// whether one was in force.
func (p *pauser) clearDiskFull() bool {
	p.mu.Lock()
	if !p.diskFull {
		p.mu.Unlock()
		return false
	}
	p.diskFull, p.diskOp, p.diskPath, p.diskSince, p.diskNextRetry = false, "", "", time.Time{}, time.Time{}
	p.notifyLocked()
	return true
}

// diskIsFull reports whether a write failed with a full disk and no retry has
// succeeded since.
func (p *pauser) diskIsFull() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.diskFull
}

// state returns whether claiming and stepping are paused, and a channel closed at
// the next change.
func (p *pauser) state() (paused bool, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.operator || p.diskFull, p.changed
}

// Paused is state, for train.Pauser.
func (p *pauser) Paused() (bool, <-chan struct{}) { return p.state() }

// DiskFull is diskIsFull, for train.Pauser.
func (p *pauser) DiskFull() bool { return p.diskIsFull() }

// wait blocks while the daemon is paused; it returns ctx's error if ctx ends first.
func (p *pauser) wait(ctx context.Context) error {
	for {
		paused, changed := p.state()
		if !paused {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// proto returns the pause state for status; nil while nothing pauses.
func (p *pauser) proto() *hindsightv1.PauseState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.protoLocked()
}

func (p *pauser) protoLocked() *hindsightv1.PauseState {
	if !p.operator && !p.diskFull {
		return nil
	}
	st := &hindsightv1.PauseState{Operator: p.operator, By: p.by, Reason: p.reason,
		DiskFull: p.diskFull, DiskFullPath: p.diskPath, DiskFullOp: p.diskOp}
	if p.operator {
		st.Since = timestamppb.New(p.since)
	}
	if p.diskFull {
		st.DiskFullSince = timestamppb.New(p.diskSince)
		st.NextRetryAt = timestamppb.New(p.diskNextRetry)
	}
	return st
}

// reasonLine is Status.pause_reason: "operator: why", "disk full: path", or both.
func reasonLine(st *hindsightv1.PauseState) string {
	if st == nil {
		return ""
	}
	var parts []string
	if st.Operator {
		r := "operator"
		if st.By != "" {
			r += " (" + st.By + ")"
		}
		if st.Reason != "" {
			r += ": " + st.Reason
		}
		parts = append(parts, r)
	}
	if st.DiskFull {
		parts = append(parts, "disk full: "+st.DiskFullPath)
	}
	return strings.Join(parts, "; ")
}
