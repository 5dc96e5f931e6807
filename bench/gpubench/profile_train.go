package gpubench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// phasePeaks records the memory high-water mark of each phase of a training step
// (xla.StepPhase: score, gradient, update): at every phase change it reads the
// peak since the last change and resets it. On the CPU that is peak RSS (the XLA
// CPU plugin's buffers are host memory); with nvidia-smi the device's too.
type phasePeaks struct {
	mu    sync.Mutex
	mem   *memWatch
	phase xla.StepPhase
	peaks map[xla.StepPhase]map[string]any
}

// observe is the trainer's OnProgress hook.
func (p *phasePeaks) observe(s xla.StepProgress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.Phase == p.phase {
		return
	}
	p.close()
	p.phase = s.Phase
}

// close records the phase that ran until now and starts the next measurement.
func (p *phasePeaks) close() {
	if p.phase != "" {
		p.peaks[p.phase] = p.mem.peaks()
	}
	p.mem.reset()
}

// trainMemory is one training step's memory, measured and predicted (the profile
// stage's "profile train memory" rows).
type trainMemory struct {
	Precision string `json:"precision"`
	Preset    string `json:"preset"`
	Layers    int    `json:"layers"`
	Params    int64  `json:"parameters"`
	T         int    `json:"T"`
	// Runtime is the process's RSS before the model was loaded (the Go runtime, the
	// plugin, earlier stages' leftovers); every other RSS figure is above it.
	Runtime int64 `json:"runtime_rss_bytes"`
	// Loaded is the RSS above Runtime once the model is loaded (host copy of the
	// weights, before the first pass moves them to the device).
	Loaded int64 `json:"loaded_bytes"`
	// Between is the RSS above Runtime between two steps: the state that outlives
	// a step, the compiled programs and what the allocators keep.
	Between int64 `json:"between_steps_bytes"`
	// RuntimeByKind and BetweenByKind are the RSS before the model was loaded and
	// between two steps by kind of mapping (rssByKind: code, heap, anon, file), so
	// compiled code shows apart from buffers.
	RuntimeByKind map[string]int64 `json:"runtime_rss_by_kind,omitempty"`
	BetweenByKind map[string]int64 `json:"between_steps_rss_by_kind,omitempty"`
	// BetweenMalloc is glibc malloc's own account between two steps: blocks in use
	// and freed blocks kept in its arenas (xla.ReadMallocStats), and its mapped blocks.
	BetweenMalloc xla.MallocStats `json:"between_steps_malloc"`
	// Phases are each phase's peak RSS above Runtime in a warm step; Peak their max.
	Phases map[string]int64 `json:"phase_peak_bytes"`
	Peak   int64            `json:"peak_bytes"`
	// GPUPhases are the device's high-water marks per phase (nvidia-smi; absent on
	// the CPU).
	GPUPhases map[string]int64 `json:"gpu_phase_peak_bytes,omitempty"`
	// ColdPeak is the first step's peak RSS above Runtime: compiles included;
	// ColdPhases its phases' (each phase compiles its programs as it first runs them).
	ColdPeak   int64            `json:"cold_peak_bytes"`
	ColdPhases map[string]int64 `json:"cold_phase_peak_bytes,omitempty"`
	// GoHeap is the Go heap in use at the warm step's end (host copies the Go side
	// holds: weights not yet placed, token and log-prob slices).
	GoHeap int64 `json:"go_heap_inuse_bytes"`
	// State is xla.Trainer.StateBytes; Estimate the memory model's prediction.
	State    xla.StateBytes `json:"state"`
	Estimate MemEstimate    `json:"estimate"`
	// Predicted is the model's state + activations (MemEstimate.Total, with the
	// update's transient); WasteRatio is Peak / Predicted.
	Predicted  int64   `json:"predicted_bytes"`
	WasteRatio float64 `json:"peak_over_predicted"`
	// PrepareSeconds and PrepareCPUSeconds time xla.Trainer.Prepare before the
	// first step (weights placed, moments made: what a daemon does at start); zero
	// with Options.ProfileNoPrepare, whose first step does it.
	PrepareSeconds    float64 `json:"prepare_seconds"`
	PrepareCPUSeconds float64 `json:"prepare_cpu_seconds"`
	// ColdSeconds, WarmSeconds and WarmCPUSeconds time the two steps (the warm
	// step's CPU seconds: every thread's, for a loaded machine).
	ColdSeconds    float64 `json:"cold_seconds"`
	ColdCPUSeconds float64 `json:"cold_cpu_seconds"`
	WarmSeconds    float64 `json:"warm_seconds"`
	WarmCPUSeconds float64 `json:"warm_cpu_seconds"`
	// ColdCompile is what the first step compiled and loaded from the compiled-program
	// cache (xla.CompileSnapshot's difference over the step): a restarted process
	// with -compile-cache loads where the first compiled (docs/performance.md "Cold
	// start").
	ColdCompile xla.CompileStats `json:"cold_compile"`
	// WholeUpdate is the trainer's xla.TrainerOptions.WholeUpdate (the old update).
	WholeUpdate bool `json:"whole_update"`
	// LayerPrograms is Options.ProfileLayerPrograms.
	LayerPrograms bool `json:"layer_programs"`
}

// profileTrain measures the memory of one training step of preset (layers: 0 for
// the preset's) on a T-token rollout in precision p: a cold step (compiles), then a
// warm one with the peak of each phase, against the memory model. It frees the
// model before it returns.
func (b *bench) profileTrain(ctx context.Context, preset string, layers, T int, p xla.Precision, whole bool) (trainMemory, error) {
	dir, mc, err := b.modelLayers(preset, layers)
	if err != nil {
		return trainMemory{}, err
	}
	if err := p.CheckBackend(b.backend); err != nil {
		return trainMemory{}, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	_, runtimeRSS, _ := rssNow()
	runtimeKinds := rssByKind()
	m, err := xla.Open(dir, xla.OpenOptions{Precision: p})
	if err != nil {
		return trainMemory{}, err
	}
	_, loaded, _ := rssNow()
	pp := &phasePeaks{mem: b.mem, peaks: map[xla.StepPhase]map[string]any{}}
	opts := trainerOptions(xla.DefaultChunkTrain, xla.BackpropTruncated)
	opts.OnProgress, opts.WholeUpdate = pp.observe, whole
	opts.Scorer.LayerPrograms = b.opts.ProfileLayerPrograms
	tr, err := xla.NewTrainer(b.backend, m, opts)
	if err != nil {
		return trainMemory{}, err
	}
	// Every token trainable, and a hint over the second quarter, so a step runs the
	// student, teacher and gradient passes.
	r := trainRollout(benchutil.Tokens(T, mc.VocabSize, 3, 4))
	r.Hints = []credit.Hint{{InsertAt: T / 4, End: T / 2, Tokens: benchutil.Tokens(16, mc.VocabSize, 5, 6)}}
	var prepSec, prepCPU float64
	if !b.opts.ProfileNoPrepare {
		t0, c0 := time.Now(), cpuSeconds()
		if err := tr.Prepare(); err != nil {
			return trainMemory{}, err
		}
		prepSec, prepCPU = time.Since(t0).Seconds(), cpuSeconds()-c0
	}
	b.mem.reset()
	t0, c0, k0 := time.Now(), cpuSeconds(), xla.CompileSnapshot()
	if _, err := tr.Step(ctx, []credit.Sequence{r}); err != nil { // compiles
		return trainMemory{}, fmt.Errorf("cold step: %w", err)
	}
	coldSec, coldCPU, k1 := time.Since(t0).Seconds(), cpuSeconds()-c0, xla.CompileSnapshot()
	coldCompile := xla.CompileStats{Compiled: k1.Compiled - k0.Compiled, CompileTime: k1.CompileTime - k0.CompileTime,
		Loaded: k1.Loaded - k0.Loaded, LoadTime: k1.LoadTime - k0.LoadTime, Preloaded: k1.Preloaded - k0.Preloaded,
		PreloadTime: k1.PreloadTime - k0.PreloadTime}
	pp.mu.Lock()
	pp.close()
	coldPhases := pp.peaks
	pp.mu.Unlock()
	cold := b.mem.peaks()
	runtime.GC()
	debug.FreeOSMemory()
	_, between, _ := rssNow()
	betweenKinds := rssByKind()
	betweenMalloc := xla.ReadMallocStats()
	pp.phase, pp.peaks = "", map[xla.StepPhase]map[string]any{}
	t0, c0 = time.Now(), cpuSeconds()
	met, err := tr.Step(ctx, []credit.Sequence{r})
	warmSec, warmCPU := time.Since(t0).Seconds(), cpuSeconds()-c0
	if err != nil {
		return trainMemory{}, fmt.Errorf("warm step: %w", err)
	}
	pp.mu.Lock()
	pp.close()
	pp.mu.Unlock()
	if !met.Updated || met.Tokens != T {
		return trainMemory{}, fmt.Errorf("train step: updated %v, %d gradient tokens of %d", met.Updated, met.Tokens, T)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	tm := trainMemory{Precision: string(p), Preset: preset, Layers: mc.NumHiddenLayers, Params: mc.NumParameters(), T: T,
		Runtime: runtimeRSS, Loaded: loaded - runtimeRSS, Between: between - runtimeRSS, Phases: map[string]int64{},
		RuntimeByKind: runtimeKinds, BetweenByKind: betweenKinds, BetweenMalloc: betweenMalloc,
		GoHeap: int64(ms.HeapInuse), State: tr.StateBytes(), WholeUpdate: whole, LayerPrograms: b.opts.ProfileLayerPrograms,
		PrepareSeconds: prepSec, PrepareCPUSeconds: prepCPU, ColdSeconds: coldSec, ColdCPUSeconds: coldCPU, ColdCompile: coldCompile, WarmSeconds: warmSec, WarmCPUSeconds: warmCPU,
		Estimate: EstimateMemoryAs(mc, T, xla.DefaultChunkTrain, false, false, p)}
	for ph, f := range coldPhases {
		if v, ok := f["peak_rss_bytes"].(int64); ok {
			if tm.ColdPhases == nil {
				tm.ColdPhases = map[string]int64{}
			}
			tm.ColdPhases[string(ph)] = v - runtimeRSS
			tm.ColdPeak = max(tm.ColdPeak, v-runtimeRSS)
		}
	}
	if v, ok := cold["peak_rss_bytes"].(int64); ok {
		tm.ColdPeak = max(tm.ColdPeak, v-runtimeRSS)
	}
	for ph, f := range pp.peaks {
		if v, ok := f["peak_rss_bytes"].(int64); ok {
			tm.Phases[string(ph)] = v - runtimeRSS
			tm.Peak = max(tm.Peak, v-runtimeRSS)
		}
		if v, ok := f["gpu_peak_bytes"].(int64); ok {
			if tm.GPUPhases == nil {
				tm.GPUPhases = map[string]int64{}
			}
			tm.GPUPhases[string(ph)] = v
		}
	}
	tm.Predicted = tm.Estimate.Total()
	tm.WasteRatio = float64(tm.Peak) / float64(tm.Predicted)
	runtime.KeepAlive(tr)
	return tm, nil
}

// modelLayers is model for preset with its layer count replaced by layers (> 0),
// written once under its own name.
func (b *bench) modelLayers(preset string, layers int) (string, *data.ModelConfig, error) {
	if layers <= 0 {
		return b.model(preset)
	}
	name := fmt.Sprintf("%s-%dl", preset, layers)
	dir := filepath.Join(b.opts.ModelDir, name)
	if _, err := os.Stat(filepath.Join(dir, data.ConfigFileName)); err != nil {
		if _, err := data.InitModel(dir, data.InitOptions{Preset: preset, Layers: layers, Seed: 1, Dtype: "bfloat16", Force: true}); err != nil {
			return "", nil, err
		}
	}
	mc, err := data.LoadModelConfig(filepath.Join(dir, data.ConfigFileName))
	if err != nil {
		return "", nil, err
	}
	return dir, mc, nil
}

// trainMemoryFields are tm as a result row's fields (its JSON), with a one-line
// breakdown in GiB.
func trainMemoryFields(tm trainMemory) map[string]any {
	raw, _ := json.Marshal(tm)
	f := map[string]any{}
	_ = json.Unmarshal(raw, &f)
	g := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/(1<<30)) }
	e := tm.Estimate
	// Code mapped since the model was loaded: the programs XLA compiled (and any
	// library pages first touched), part of Between.
	code := tm.BetweenByKind["code"] - tm.RuntimeByKind["code"]
	f["compiled_code_bytes"] = code
	f["summary_gib"] = fmt.Sprintf("peak %s (score %s, gradient %s, update %s) vs predicted %s = state %s (weights %s, masters %s, grads %s, moments %s) + activations %s + update %s: ×%.2f; between steps %s (code %s), runtime %s; cold step %s (score %s, gradient %s, update %s)",
		g(tm.Peak), g(tm.Phases["score"]), g(tm.Phases["gradient"]), g(tm.Phases["update"]), g(tm.Predicted), g(e.State()),
		g(e.Weights), g(e.Masters), g(e.Grads), g(e.Optimizer), g(max(e.Score, e.Train)+e.KVCache), g(e.Update), tm.WasteRatio, g(tm.Between), g(code), g(tm.Runtime),
		g(tm.ColdPeak), g(tm.ColdPhases["score"]), g(tm.ColdPhases["gradient"]), g(tm.ColdPhases["update"]))
	return f
}
