package gpubench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

// bench is one Run's state.
type bench struct {
	opts    Options
	log     zerolog.Logger
	res     *Results
	backend backends.Backend
	mem     *memWatch
	models  map[string]string // preset → model directory
	st      *StageResult      // the stage running
	// peaks of the matmul stage (FLOP/s), for MFU: XLA f32 and PyTorch bf16/f32.
	xlaPeak, torchBF16Peak, torchF32Peak float64
	// measured peaks of the long stage, for the memory model's check.
	measured []measuredPeak
	// stages counts stage goroutines still running, abandoned ones included: the
	// backend is finalized only once they have returned (a cancelled stage stops
	// between chunks), else a chunk still executing uses a destroyed PJRT client.
	stages sync.WaitGroup
}

// Run runs opts.Stages in order, each under its own budget, writing results.json and
// a log line per measurement as it goes. A stage that fails, panics or runs out of
// time is recorded and the next one runs; Run returns the results and an error only
// when it could not start (bad options, no backend, unwritable output).
func Run(ctx context.Context, opts Options, clientOptions map[string]any, log zerolog.Logger) (*Results, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return nil, fmt.Errorf("bench-gpu: create %s: %w", opts.Out, err)
	}
	if opts.ModelDir == "" {
		opts.ModelDir = filepath.Join(opts.Out, "models")
	}
	mode := "gpu"
	if opts.CPU {
		mode = "cpu-rehearsal"
	}
	b := &bench{opts: opts, log: log, res: newResults(opts.Out, mode), models: map[string]string{}}
	spec := xla.ResolveBackend(opts.Backend, "")
	backend, err := xla.NewBackendWithOptions(spec, clientOptions)
	if err != nil {
		return nil, fmt.Errorf("bench-gpu: %w", err)
	}
	defer func() {
		b.stages.Wait()
		backend.Finalize()
	}()
	b.backend = backend
	b.mem = newMemWatch()
	defer b.mem.close()
	name, dev := xla.BackendInfo(backend)
	b.res.Backend, b.res.Device = spec, name+" / "+dev
	b.res.Env["go"] = runtime.Version()
	b.res.Env["cpus"] = runtime.NumCPU()
	b.res.Env["client_options"] = clientOptions
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/gomlx/gomlx" || d.Path == "github.com/gomlx/go-xla" {
				b.res.Env[d.Path] = d.Version
			}
		}
	}
	if info, err := b.peer(ctx, "info", "--device", opts.Device); err != nil {
		b.res.Env["torch"] = "unavailable: " + err.Error()
	} else {
		b.res.Env["torch"] = info
	}
	log.Info().Str("backend", spec).Str("device", b.res.Device).Any("torch", b.res.Env["torch"]).Msg("bench-gpu start")
	if err := b.res.save(); err != nil {
		return nil, fmt.Errorf("bench-gpu: %w", err)
	}
	stages := map[string]func(context.Context) error{
		"peak": b.stagePeak, "parity": b.stageParity, "profile": b.stageProfile, "speed": b.stageSpeed,
		"generate": b.stageGenerate, "long": b.stageLong, "dataparallel": b.stageDataParallel, "memory": b.stageMemory,
	}
	for _, s := range opts.Stages {
		b.runStage(ctx, s, stages[s])
	}
	now := time.Now().UTC()
	b.res.Finished = &now
	return b.res, b.res.save()
}

// runStage runs one stage under its budget. A stage that overruns is abandoned:
// its context is cancelled (the scorers and trainers stop between chunks), it is
// recorded as a timeout and, after a grace of a tenth of its budget, the next
// stage starts whether or not it has returned.
func (b *bench) runStage(ctx context.Context, name string, fn func(context.Context) error) {
	budget := b.opts.Budgets[name]
	st := &StageResult{Name: name, Budget: budget.Seconds(), Data: []Record{}}
	b.res.mu.Lock()
	b.res.Stages = append(b.res.Stages, st)
	b.res.mu.Unlock()
	b.st = st
	b.log.Info().Str("stage", name).Dur("budget", budget).Msg("stage start")
	sctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	t0 := time.Now()
	done := make(chan error, 1)
	b.stages.Add(1)
	go func() {
		defer b.stages.Done()
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("panic: %v", r)
			}
		}()
		done <- fn(sctx)
	}()
	var err error
	select {
	case err = <-done:
	case <-sctx.Done():
		select {
		case err = <-done:
		case <-time.After(budget / 10):
			err = sctx.Err()
		}
	}
	b.res.mu.Lock()
	st.Seconds = time.Since(t0).Seconds()
	switch {
	case err == nil:
		st.Status = StatusOK
	case errors.Is(err, context.DeadlineExceeded) || sctx.Err() != nil:
		st.Status, st.Error = StatusTimeout, fmt.Sprintf("over its %s budget: %v", budget, err)
	default:
		st.Status, st.Error = StatusFailed, err.Error()
	}
	b.res.mu.Unlock()
	ev := b.log.Info()
	if st.Status != StatusOK {
		ev = b.log.Warn().Str("error", st.Error)
	}
	ev.Str("stage", name).Str("status", st.Status).Float64("seconds", st.Seconds).Msg("stage done")
	if err := b.res.save(); err != nil {
		b.log.Error().Err(err).Msg("save results")
	}
}

// record adds a measurement to the running stage, logs it and saves results.json.
func (b *bench) record(what string, fields map[string]any) {
	for k, v := range fields { // JSON has no NaN or ±Inf
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			fields[k] = fmt.Sprint(f)
		}
	}
	b.log.Info().Str("stage", b.st.Name).Fields(fields).Msg(what)
	if err := b.res.add(b.st, what, fields); err != nil {
		b.log.Error().Err(err).Msg("save results")
	}
}

// model returns the directory of preset's random-weight model, writing it once
// (seed 1, byte tokenizer; the qwen3 0.6b/1.7b presets keep their 151936 rows and
// are stored in bf16).
func (b *bench) model(preset string) (string, *data.ModelConfig, error) {
	dir := filepath.Join(b.opts.ModelDir, preset)
	if _, ok := b.models[preset]; !ok {
		t0 := time.Now()
		if _, err := os.Stat(filepath.Join(dir, data.ConfigFileName)); err != nil {
			// The real-size presets are stored in bf16 (half the bytes to write and
			// read); both hindsight and the peer compute on the same values in f32.
			dtype := "float32"
			if strings.HasSuffix(preset, "b") && strings.HasPrefix(preset, "qwen3-") {
				dtype = "bfloat16"
			}
			if _, err := data.InitModel(dir, data.InitOptions{Preset: preset, Seed: 1, Dtype: dtype, Force: true}); err != nil {
				return "", nil, err
			}
			b.log.Info().Str("preset", preset).Dur("took", time.Since(t0)).Msg("wrote model")
		}
		b.models[preset] = dir
	}
	mc, err := data.LoadModelConfig(filepath.Join(dir, data.ConfigFileName))
	if err != nil {
		return "", nil, err
	}
	return dir, mc, nil
}
