package gpubench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
)

// memWatch reports the peak memory of a measurement: the process's peak RSS
// (VmHWM, reset through /proc/self/clear_refs before each measurement) and, where
// nvidia-smi is on PATH, the device's peak used memory sampled every 50 ms. With the
// CUDA plugin's BFC allocator (preallocate=false) device memory only grows, so the
// device peak of a measurement is the high-water mark of the run so far.
type memWatch struct {
	mu      sync.Mutex
	gpuPeak int64 // bytes since the last reset; -1 without nvidia-smi
	cancel  context.CancelFunc
}

func newMemWatch() *memWatch {
	w := &memWatch{gpuPeak: -1}
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return w
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, path, "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "50")
	out, err := cmd.StdoutPipe()
	if err != nil || cmd.Start() != nil {
		cancel()
		return w
	}
	w.cancel, w.gpuPeak = cancel, 0
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			mib, err := strconv.ParseInt(strings.TrimSpace(strings.Split(sc.Text(), ",")[0]), 10, 64)
			if err != nil {
				continue
			}
			w.mu.Lock()
			w.gpuPeak = max(w.gpuPeak, mib<<20)
			w.mu.Unlock()
		}
		cmd.Wait()
	}()
	return w
}

// reset starts a measurement.
func (w *memWatch) reset() {
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM (Linux ≥ 4.0); ignored elsewhere
	w.mu.Lock()
	if w.gpuPeak >= 0 {
		w.gpuPeak = 0
	}
	w.mu.Unlock()
}

// peaks returns the fields of a measurement: peak_rss_bytes, rss_bytes and, with
// nvidia-smi, gpu_peak_bytes.
func (w *memWatch) peaks() map[string]any {
	m := map[string]any{}
	if hwm, rss, err := rssNow(); err == nil {
		m["peak_rss_bytes"], m["rss_bytes"] = hwm, rss
	}
	w.mu.Lock()
	if w.gpuPeak >= 0 {
		m["gpu_peak_bytes"] = w.gpuPeak
	}
	w.mu.Unlock()
	return m
}

func (w *memWatch) close() {
	if w.cancel != nil {
		w.cancel()
	}
}

// rssNow reads VmHWM and VmRSS (bytes) from /proc/self/status.
func rssNow() (hwm, rss int64, err error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, fmt.Errorf("read /proc/self/status: %w", err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmHWM" && k != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/self/status %s: %w", k, err)
		}
		if k == "VmHWM" {
			hwm = kb << 10
		} else {
			rss = kb << 10
		}
	}
	return hwm, rss, nil
}

// rssByKind is the process's resident memory by kind of mapping, in bytes, from
// /proc/self/smaps: "code" (executable mappings: the plugin's and Go's text and the
// code XLA compiled into anonymous pages), "heap" (malloc's main arena, [heap]),
// "anon" (other anonymous memory: the Go heap, malloc's mmapped blocks, which are
// XLA CPU's buffers), "file" (other file mappings). nil where smaps cannot be read.
func rssByKind() map[string]int64 {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil
	}
	defer f.Close()
	out := map[string]int64{}
	kind := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if strings.Contains(fields[0], "-") && len(fields) >= 5 { // a mapping's header
			perms, name := fields[1], ""
			if len(fields) >= 6 {
				name = fields[5]
			}
			switch {
			case strings.Contains(perms, "x"):
				kind = "code"
			case name == "[heap]":
				kind = "heap"
			case name == "" || strings.HasPrefix(name, "["):
				kind = "anon"
			default:
				kind = "file"
			}
			continue
		}
		if fields[0] == "Rss:" && len(fields) >= 2 {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err == nil {
				out[kind] += kb << 10
			}
		}
	}
	return out
}
