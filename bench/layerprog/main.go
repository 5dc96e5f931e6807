// Command layerprog measures the Scorer's layer programs (xla.ScorerOptions.LayerPrograms:
// one decoder layer's program run once per layer) against the unrolled step program
// (every layer in one program) in one process: the first pass of each (compiles
// included: programs, compile seconds, CPU seconds) and warm passes interleaved
// (tokens per CPU-second, every thread's, for a loaded machine), with the largest
// log-prob difference between the two. docs/performance.md "Cold start".
//
//	go run ./bench/layerprog -preset smollm2-135m -tokens 1024
//	go run ./bench/layerprog -preset qwen3-0.6b -tokens 1024 -dir /tmp/models
//	go run ./bench/layerprog -preset smollm2-135m -tokens 256 -train both
//
// It is a benchmark, not a test: nothing asserts on the numbers.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

func main() {
	preset := flag.String("preset", "smollm2-135m", "init-model preset (random weights, float32)")
	layers := flag.Int("layers", 0, "layer count in place of the preset's (0: the preset's)")
	n := flag.Int("tokens", 1024, "rollout length (tokens)")
	reps := flag.Int("reps", 2, "warm passes of each")
	dir := flag.String("dir", "", "directory keeping the generated model between runs (default: a temporary one)")
	backendSpec := flag.String("backend", "xla-cpu", "GoMLX backend")
	out := flag.String("json", "", "also write the results to this file")
	logCompiles := flag.Bool("log-compiles", false, "log every program XLA compiles, with its wall time (to stderr)")
	train := flag.String("train", "", "instead of scoring, run training steps (-reps + 1 each) with: unrolled, layers or both (one after the other, each on the model opened afresh)")
	flag.Parse()
	if *logCompiles {
		log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).With().Timestamp().Logger()
		if err := xla.ConfigureProgramCache(xla.ProgramCache{Log: log}); err != nil {
			fmt.Fprintln(os.Stderr, "bench/layerprog:", err)
			os.Exit(1)
		}
	}
	if err := run(*preset, *layers, *n, *reps, *dir, *backendSpec, *out, *train); err != nil {
		fmt.Fprintln(os.Stderr, "bench/layerprog:", err)
		os.Exit(1)
	}
}

// result is one way of running the model.
type result struct {
	Mode           string  `json:"mode"`
	Programs       int     `json:"programs_compiled"`
	CompileSeconds float64 `json:"compile_seconds"`
	CompileCPU     float64 `json:"compile_cpu_seconds"`
	// XLACompiles and XLACompileSeconds are what the plugin compiled during the
	// first pass (xla.CompileSnapshot: every compile the process made, the
	// Scorer's PreCompiles or not).
	XLACompiles       int64   `json:"xla_compiles"`
	XLACompileSeconds float64 `json:"xla_compile_seconds"`
	FirstSeconds      float64 `json:"first_pass_seconds"`
	FirstCPUSeconds   float64 `json:"first_pass_cpu_seconds"`
	WarmSeconds       float64 `json:"warm_pass_seconds"`     // mean
	WarmCPUSeconds    float64 `json:"warm_pass_cpu_seconds"` // mean
	TokensPerCPUS     float64 `json:"warm_tokens_per_cpu_second"`
}

func run(preset string, layers, n, reps int, dir, backendSpec, out, train string) error {
	ctx := context.Background()
	if dir == "" {
		tmp, err := os.MkdirTemp("", "bench-layerprog-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	name := preset
	if layers > 0 {
		name = fmt.Sprintf("%s-%dl", preset, layers)
	}
	mdir := filepath.Join(dir, name)
	if _, err := os.Stat(filepath.Join(mdir, data.ConfigFileName)); err != nil {
		if _, err := data.InitModel(mdir, data.InitOptions{Preset: preset, Layers: layers, Seed: 1, Force: true}); err != nil {
			return err
		}
	}
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return err
	}
	if train != "" {
		var modes []bool
		switch train {
		case "unrolled":
			modes = []bool{false}
		case "layers":
			modes = []bool{true}
		case "both":
			modes = []bool{false, true}
		default:
			return fmt.Errorf("-train %q: want unrolled, layers or both", train)
		}
		var rs []trainResult
		var T int
		for _, layered := range modes {
			runtime.GC() // the previous mode's trainer and model: their device buffers go with them
			m, err := xla.Open(mdir, xla.OpenOptions{})
			if err != nil {
				return err
			}
			tokens := benchutil.Tokens(n, m.Config.VocabSize, 3, 4)
			T = len(tokens)
			r, err := trainMode(ctx, backend, m, tokens, layered, reps+1)
			if err != nil {
				return err
			}
			rs = append(rs, r)
		}
		printTrain(name, T, rs)
		if out == "" {
			return nil
		}
		raw, err := json.MarshalIndent(map[string]any{"model": name, "tokens": T, "train": rs}, "", "  ")
		if err != nil {
			return err
		}
		return os.WriteFile(out, append(raw, '\n'), 0o644)
	}
	m, err := xla.Open(mdir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	tokens := benchutil.Tokens(n, m.Config.VocabSize, 3, 4)
	modes := []struct {
		name string
		opts xla.ScorerOptions
	}{{"unrolled", xla.ScorerOptions{}}, {"layer programs", xla.ScorerOptions{LayerPrograms: true}}}
	res := make([]result, len(modes))
	scorers := make([]*xla.Scorer, len(modes))
	lps := make([][]float32, len(modes))
	pass := func(i int) (wall, cpu float64, err error) {
		t0, c0 := time.Now(), benchutil.CPUTime()
		lp, kv, err := scorers[i].Score(ctx, tokens)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", modes[i].name, err)
		}
		wall, cpu = time.Since(t0).Seconds(), (benchutil.CPUTime() - c0).Seconds()
		lps[i] = lp
		return wall, cpu, kv.Close()
	}
	// The layer programs' first pass runs first, so the weights' first move to the
	// device counts against them, not the unrolled program.
	for i := len(modes) - 1; i >= 0; i-- {
		md := modes[i]
		if scorers[i], err = xla.NewScorer(backend, m, md.opts); err != nil {
			return err
		}
		k0 := xla.CompileSnapshot()
		wall, cpu, err := pass(i)
		if err != nil {
			return err
		}
		k1 := xla.CompileSnapshot()
		st := scorers[i].Stats()
		res[i] = result{Mode: md.name, Programs: st.Programs, CompileSeconds: st.CompileSeconds, CompileCPU: st.CompileCPUSeconds, FirstSeconds: wall, FirstCPUSeconds: cpu,
			XLACompiles: k1.Compiled - k0.Compiled, XLACompileSeconds: (k1.CompileTime - k0.CompileTime).Seconds()}
	}
	for range reps { // interleaved, so both see the same load
		for i := range modes {
			wall, cpu, err := pass(i)
			if err != nil {
				return err
			}
			res[i].WarmSeconds += wall / float64(reps)
			res[i].WarmCPUSeconds += cpu / float64(reps)
		}
	}
	worst := 0.0
	for t := 1; t < n; t++ {
		worst = math.Max(worst, math.Abs(float64(lps[1][t]-lps[0][t])))
	}
	fmt.Printf("%s (%d layers, %d parameters), %d tokens, %s, %d warm passes each, interleaved; max |Δ log-prob| %.2g\n\n",
		name, m.Config.NumHiddenLayers, m.NumParameters(), n, backendSpec, reps, worst)
	fmt.Println("| program | compiled | compile CPU-s (wall) | XLA compiles (s) | first pass CPU-s (wall) | warm pass CPU-s (wall) | warm tokens / CPU-s |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for i := range res {
		r := &res[i]
		r.TokensPerCPUS = float64(n) / r.WarmCPUSeconds
		fmt.Printf("| %s | %d | %.1f (%.1f) | %d (%.1f) | %.1f (%.1f) | %.2f (%.1f) | %.1f |\n", r.Mode, r.Programs, r.CompileCPU, r.CompileSeconds, r.XLACompiles, r.XLACompileSeconds, r.FirstCPUSeconds, r.FirstSeconds,
			r.WarmCPUSeconds, r.WarmSeconds, r.TokensPerCPUS)
	}
	u, l := res[0], res[1]
	fmt.Printf("\nlayer programs / unrolled: compile %.2f× (CPU; wall %.2f×), first pass %.2f× (CPU), warm tokens/CPU-s %.3f×\n",
		l.CompileCPU/u.CompileCPU, l.CompileSeconds/u.CompileSeconds, l.FirstCPUSeconds/u.FirstCPUSeconds, l.TokensPerCPUS/u.TokensPerCPUS)
	if out == "" {
		return nil
	}
	raw, err := json.MarshalIndent(map[string]any{"model": name, "layers": m.Config.NumHiddenLayers, "tokens": n, "reps": reps,
		"max_abs_logprob_diff": worst, "results": res}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(raw, '\n'), 0o644)
}
