// Package benchutil holds what hindsight's benchmarks (bench/*, go test -bench)
// share: deterministic random token ids, a sampler of the Go heap's peak, the
// process's CPU time, the directory of a benchmark program's source (where its
// Python peer lies), and their -json results files.
package benchutil

import (
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Tokens returns n token ids in [0, vocab) drawn from a PCG seeded with seed and
// stream: the same arguments give the same ids on every run.
func Tokens(n, vocab int, seed, stream uint64) []int32 {
	rng := rand.New(rand.NewPCG(seed, stream))
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(rng.IntN(vocab))
	}
	return out
}

// HeapSampler reads the Go heap's statistics every period until Stop and keeps the
// largest HeapAlloc and HeapInuse seen. The pure-Go backend's buffers live on the Go
// heap, so its peak is the step's memory there.
type HeapSampler struct {
	// Base is the reading taken when the sampler started.
	Base              runtime.MemStats
	peakAlloc, peakIn atomic.Uint64
	done, stopped     chan struct{}
}

// StartHeapSampler takes the base reading and starts sampling every period. It does
// not collect garbage first: callers that want a clean base call runtime.GC.
func StartHeapSampler(period time.Duration) *HeapSampler {
	h := &HeapSampler{done: make(chan struct{}), stopped: make(chan struct{})}
	runtime.ReadMemStats(&h.Base)
	h.peakAlloc.Store(h.Base.HeapAlloc)
	h.peakIn.Store(h.Base.HeapInuse)
	go func() {
		defer close(h.stopped)
		var ms runtime.MemStats
		for {
			select {
			case <-h.done:
				return
			case <-time.After(period):
			}
			runtime.ReadMemStats(&ms)
			h.peakAlloc.Store(max(h.peakAlloc.Load(), ms.HeapAlloc))
			h.peakIn.Store(max(h.peakIn.Load(), ms.HeapInuse))
		}
	}()
	return h
}

// Stop ends the sampling and returns the peaks of HeapAlloc and HeapInuse, the base
// readings included.
func (h *HeapSampler) Stop() (peakAlloc, peakInuse uint64) {
	close(h.done)
	<-h.stopped
	return h.peakAlloc.Load(), h.peakIn.Load()
}

// CallerDir returns the directory of the source file of its caller, or fallback when
// the runtime cannot tell (a binary built with -trimpath run elsewhere).
func CallerDir(fallback string) string {
	_, file, _, ok := runtime.Caller(1)
	if !ok {
		return fallback
	}
	return filepath.Dir(file)
}

// CPUTime is the CPU time (user + system, every thread) the process has used so
// far: on a machine shared with other work a benchmark's tokens per CPU-second
// moves far less than its tokens per wall second.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// WriteJSON writes v to path as indented JSON, durably (nothing when path is
// empty): a benchmark's -json results file.
func WriteJSON(path string, v any) error {
	if path == "" {
		return nil
	}
	raw, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileBytes(path, append(raw, '\n'), 0o644)
}
