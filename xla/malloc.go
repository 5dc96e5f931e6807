package xla

// #include <malloc.h>
import "C"

import (
	"os"
	"strings"
	"sync"
)

// MallocThreshold is the allocation size (bytes) from which glibc's malloc maps
// fresh pages and unmaps them on free (M_MMAP_THRESHOLD), and the free space at
// the top of its heap from which it gives memory back (M_TRIM_THRESHOLD), as
// hindsight sets them for an XLA backend.
//
// XLA CPU allocates every execution's temporaries (and the outputs, the device
// buffers) with malloc. glibc's default thresholds start at 128 KiB but rise to
// the size of the largest block freed (up to 32 MiB), after which blocks that
// size come from the heap and are kept on free: on a training step of the
// SmolLM2-135M shape at 15 layers that was 0.27 GiB held between steps, 17% of
// the step's predicted memory (docs/performance.md "Training-step memory").
// Fixed thresholds keep them from rising: a large block goes back to the OS when
// freed. NewTrainer sets them on an XLA backend (a process that trains); a process
// that only samples keeps glibc's defaults, under which a decode step's cache-sized
// outputs reuse freed heap blocks instead of faulting in fresh pages every step.
const MallocThreshold = 128 << 10

var mallocOnce sync.Once

// setMallocThresholds fixes glibc's mmap and trim thresholds at MallocThreshold,
// once per process, unless the environment sets them (MALLOC_MMAP_THRESHOLD_, or
// GLIBC_TUNABLES naming mmap_threshold): yours win. It reports whether it set them.
func setMallocThresholds() (set bool) {
	mallocOnce.Do(func() {
		if _, ok := os.LookupEnv("MALLOC_MMAP_THRESHOLD_"); ok || strings.Contains(os.Getenv("GLIBC_TUNABLES"), "mmap_threshold") {
			return
		}
		set = C.mallopt(C.M_MMAP_THRESHOLD, MallocThreshold) == 1 && C.mallopt(C.M_TRIM_THRESHOLD, MallocThreshold) == 1
	})
	return set
}

// MallocStats is what glibc's malloc holds, in bytes (mallinfo2, every arena):
// InUse the blocks allocated from its arenas, Free the freed blocks it keeps in
// them, Mapped the large blocks it mapped on their own (XLA CPU's buffers above
// MallocThreshold). Zero where the C library has no mallinfo2.
type MallocStats struct{ InUse, Free, Mapped int64 }

// ReadMallocStats reads MallocStats now.
func ReadMallocStats() MallocStats {
	mi := C.mallinfo2()
	return MallocStats{InUse: int64(mi.uordblks), Free: int64(mi.fordblks), Mapped: int64(mi.hblkhd)}
}

// trimMalloc gives the free blocks glibc's malloc keeps in its arenas back to the
// OS (malloc_trim). XLA CPU's allocations below MallocThreshold come from the
// arenas of the threads that ran them, and what a step freed there stayed
// resident: 0.19 GiB between two steps at the 53M-parameter shape (mallinfo2's
// free bytes, beside 0.05 GiB in use), 15% of the step's predicted memory. A
// Trainer on an XLA backend trims after each step, and before each update (in a
// first step the passes' compiles freed 0.15 GiB there at the same shape).
func trimMalloc() { C.malloc_trim(0) }
