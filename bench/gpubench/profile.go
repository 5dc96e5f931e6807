package gpubench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// stageProfile is where one scoring pass's time and memory go, for one preset at
// one T (on the CPU: qwen3-0.6b, f32, 3,233 tokens, bench/gpu/realsize_cpu.sh):
// the model load (seconds, RSS and Go heap after it), NewScorer, a cold pass
// (moving the weights to the device and compiles
// included) and warm passes, each with the Scorer's breakdown (programs compiled,
// compile, execute, host↔device copies, padding) and the process's peak RSS. With
// Options.Pprof it writes a CPU profile of the passes and a heap profile after them
// to OUT/profile-cpu.pprof and OUT/profile-heap.pprof. The log-probs go to
// OUT/profile-logprobs.json; with a peer, PyTorch scores the same tokens on the same
// weights (time, its own peak RSS, max |Δ log-prob|).
func (b *bench) stageProfile(ctx context.Context) error {
	preset, T := b.opts.ProfilePreset, b.opts.ProfileT
	if err := b.profileTrainRows(ctx); err != nil {
		return err
	}
	dir, mc, err := b.model(preset)
	if err != nil {
		return err
	}
	b.mem.reset()
	t0, c0 := time.Now(), cpuSeconds()
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	load := time.Since(t0).Seconds()
	f := map[string]any{"preset": preset, "model_dir": dir, "seconds": load, "cpu_seconds": cpuSeconds() - c0, "parameters": m.NumParameters(),
		"weight_bytes_f32": 4 * int64(m.NumParameters())}
	b.addMem(f)
	b.record("profile load", f)

	t0, c0 = time.Now(), cpuSeconds()
	s, err := xla.NewScorer(b.backend, m, xla.ScorerOptions{})
	if err != nil {
		return err
	}
	f = map[string]any{"preset": preset, "seconds": time.Since(t0).Seconds(), "cpu_seconds": cpuSeconds() - c0}
	b.addMem(f)
	b.record("profile new scorer", f)
	tokens := benchutil.Tokens(T, mc.VocabSize, 7, 8)
	if b.opts.Pprof {
		pf, err := os.Create(filepath.Join(b.opts.Out, "profile-cpu.pprof"))
		if err != nil {
			return fmt.Errorf("profile: %w", err)
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return fmt.Errorf("profile: start cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	var lp []float32
	for rep := range 1 + b.opts.Reps {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.ResetStats()
		t0, c0 := time.Now(), cpuSeconds()
		out, cache, err := s.Score(ctx, tokens)
		if err != nil {
			return fmt.Errorf("score: %w", err)
		}
		sec, cpu := time.Since(t0).Seconds(), cpuSeconds()-c0
		kv := cache.Bytes()
		cache.Close()
		lp = out
		what := "profile score warm"
		if rep == 0 {
			what = "profile score cold"
		}
		f := map[string]any{"preset": preset, "T": T, "seconds": sec, "tokens_per_s": float64(T) / sec,
			"cpu_seconds": cpu, "chunk": s.Chunk(), "kv_cache_bytes": kv}
		for k, v := range statsFields(s.Stats(), 1) {
			f[k] = v
		}
		b.mfu(f, ForwardFLOPs(mc, T), sec)
		b.addMem(f)
		b.record(what, f)
	}
	if b.opts.Pprof {
		pprof.StopCPUProfile()
		if err := writeHeapProfile(filepath.Join(b.opts.Out, "profile-heap.pprof")); err != nil {
			return err
		}
	}
	tokPath := filepath.Join(b.opts.Out, "profile-tokens.json")
	raw, _ := json.Marshal(tokens)
	if err := fsutil.WriteFileBytes(tokPath, raw, 0o644); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	raw, _ = json.Marshal(lp[1:])
	if err := fsutil.WriteFileBytes(filepath.Join(b.opts.Out, "profile-logprobs.json"), raw, 0o644); err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	out, err := b.peer(ctx, "score", "--model", dir, "--tokens", tokPath, "--device", b.opts.Device, "--reps", strconv.Itoa(b.opts.Reps))
	if err != nil {
		b.record("torch profile score skipped", map[string]any{"preset": preset, "T": T, "reason": err.Error()})
		return nil
	}
	tl, _ := out["logprobs"].([]any)
	want := make([]float32, len(tl))
	for i, v := range tl {
		x, _ := v.(float64)
		want[i] = float32(x)
	}
	delete(out, "logprobs")
	out["max_abs_vs_hindsight"], out["mean_abs_vs_hindsight"] = diff(lp[1:], want)
	b.record("torch profile score", out)
	return nil
}

// profileTrainRows records the memory of a training step of the profile preset
// (Options.ProfileTrainT tokens, Options.ProfileLayers layers) in each precision
// the backend runs, with the update of before issue 42 beside it under
// Options.ProfileBefore: the "profile train memory" rows. It runs first, so that
// the runtime it measures against holds no other model.
func (b *bench) profileTrainRows(ctx context.Context) error {
	if b.opts.ProfileTrainT <= 0 {
		return nil
	}
	for _, ps := range b.opts.ProfileTrainPrecisions {
		p := xla.Precision(ps)
		if !slices.Contains(b.opts.Precisions, ps) || p.CheckBackend(b.backend) != nil {
			continue
		}
		for _, whole := range []bool{false, true} {
			if whole && !b.opts.ProfileBefore {
				continue
			}
			tm, err := b.profileTrain(ctx, b.opts.ProfilePreset, b.opts.ProfileLayers, b.opts.ProfileTrainT, p, whole)
			if err != nil {
				return fmt.Errorf("profile train %s: %w", p, err)
			}
			b.record("profile train memory", trainMemoryFields(tm))
		}
	}
	return nil
}

// statsFields are a Scorer's ScoreStats as result fields, times per pass.
func statsFields(st xla.ScoreStats, passes int) map[string]any {
	p := float64(max(passes, 1))
	return map[string]any{"programs_compiled": st.Programs, "compile_seconds": st.CompileSeconds,
		"execute_seconds": st.ExecuteSeconds / p, "cache_seconds": st.CacheSeconds / p, "copy_seconds": st.CopySeconds / p,
		"chunks": st.Chunks / max(passes, 1), "positions_run": st.Positions / max(passes, 1), "tokens": st.Tokens / max(passes, 1)}
}

// addMem adds the process's memory now to f: peak and current RSS (memWatch) and
// the Go heap in use and held from the OS.
func (b *bench) addMem(f map[string]any) {
	for k, v := range b.mem.peaks() {
		f[k] = v
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f["go_heap_inuse_bytes"], f["go_sys_bytes"] = ms.HeapInuse, ms.Sys
}

// cpuSeconds is the process's user + system CPU time so far, every thread (the
// XLA runtime's included): on shared cores it says what a pass cost when the wall
// clock says how busy the machine was.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return nil
}
