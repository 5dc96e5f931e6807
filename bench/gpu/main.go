// Command gpu is the GPU run: every stage of bench/gpubench (peak, parity, profile,
// speed, generate, long, dataparallel, memory) on the device it runs on, against a
// PyTorch peer on the same weights. It is its own binary, apart from the product's
// hindsight and hindsightd: bench/gpu/build.sh builds it as
// bench/gpu/bin/hindsight-bench-gpu and bench/gpu/run.sh runs it; `go run ./bench/gpu
// -out DIR -cpu` runs the rehearsal here; `hindsight bench-gpu` finds and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/bench/gpubench"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/xla"
)

// The program's name in messages: its own, or the command's that launched it
// (`hindsight bench-gpu` runs it with that argv[0]), so that a message names what the
// user typed.
const (
	programName  = "hindsight-bench-gpu"
	launcherName = "hindsight bench-gpu"
)

func main() {
	name := programName
	if os.Args[0] == launcherName {
		name = launcherName
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, name, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the program, `hindsight-bench-gpu -out DIR [-cpu] …`, called name in messages.
func run(ctx context.Context, name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "output `directory`: results.json, bench.log (created)")
	cpu := fs.Bool("cpu", false, "rehearsal: tiny sizes on the CPU (PyTorch on the CPU too)")
	backend := fs.String("backend", "", "GoMLX backend (default $GOMLX_BACKEND, else the pure-Go backend); on a GPU xla:<abs path>/xla_cuda_plugin.so")
	clientOpts := fs.String("client-options", "", "PJRT client create options, `k=v,…` (the CUDA plugin: preallocate=false so PyTorch and the memory peaks can share the device)")
	python := fs.String("python", "", "python3 with torch for the PyTorch peer (empty: the PyTorch measurements are skipped and say so)")
	peer := fs.String("peer", "bench/gpu/torch_peer.py", "the PyTorch peer `script`")
	modelDir := fs.String("model-dir", "", "where the random-weight models are written (default OUT/models)")
	stages := fs.String("stages", strings.Join(gpubench.AllStages, ","), "comma-separated stages to run, in order")
	budgetScale := fs.Float64("budget-scale", 1, "multiply every stage's time budget")
	longT := fs.Int("long-t", 0, "long-rollout length (0: the mode's default)")
	speedT := fs.String("speed-t", "", "comma-separated speed lengths (default: the mode's)")
	profilePreset := fs.String("profile-preset", "", "the profile stage's model preset (default: the mode's: qwen3-tiny on -cpu, else qwen3-0.6b)")
	profileT := fs.Int("profile-t", 0, "the profile stage's rollout length (0: the mode's default, 3233 on a GPU)")
	profileTrainT := fs.Int("profile-train-t", -1, "the profile stage's training step length whose memory it breaks down (-1: the mode's default, 256 on a GPU; 0: none)")
	profileLayers := fs.Int("profile-layers", 0, "the layer count of the profile stage's training-step model (0: the preset's)")
	profileLayerPrograms := fs.Bool("profile-layer-programs", false, "the profile stage's training step runs one decoder layer's program per layer (xla.ScorerOptions.LayerPrograms) instead of the unrolled programs")
	profileNoPrepare := fs.Bool("profile-no-prepare", false, "the profile stage's training step starts on a trainer not prepared (xla.Trainer.Prepare): its first step places the weights and makes the optimizer's moments")
	profileBefore := fs.Bool("profile-before", false, "the profile stage also runs the training step with the update of before issue 42 (one AdamW program over every weight)")
	pprofOut := fs.Bool("pprof", false, "the profile stage writes OUT/profile-cpu.pprof and OUT/profile-heap.pprof")
	precisions := fs.String("precisions", "", "comma-separated model.precision values the parity and speed stages run (default: f32,bf16)")
	reps := fs.Int("reps", 0, "timed repetitions after the first (compiling) pass (0: the mode's default)")
	compileCache := fs.String("compile-cache", "", "keep compiled programs in this `directory` and load them from it (docs/performance.md \"Cold start\"): a second run's first pass loads instead of compiling; empty: off")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s -out DIR [-cpu] [-backend SPEC] [-python PY] [-stages LIST]\n\n", name)
		fmt.Fprintf(stderr, "Measures hindsight on this device stage by stage (peak, parity, profile, speed, generate, long, memory),\n"+
			"each under its own time budget, against a PyTorch peer on the same weights; writes OUT/results.json\n"+
			"after every measurement. bench/gpu/run.sh runs it on a GPU or, with --cpu, as the CPU rehearsal.\n\n")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Run(fs, args, stderr); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr, cliflag.Rule{Bad: *out == "", Msg: "-out DIR is required"}, cliflag.NoArgs(fs)); !ok {
		return code
	}
	opts := gpubench.Defaults(*cpu)
	opts.Out, opts.Backend, opts.Python, opts.Peer, opts.ModelDir = *out, *backend, *python, *peer, *modelDir
	opts.Stages = strings.Split(*stages, ",")
	for k, v := range opts.Budgets {
		opts.Budgets[k] = time.Duration(float64(v) * *budgetScale)
	}
	if *longT > 0 {
		opts.LongT = *longT
	}
	if *profilePreset != "" {
		opts.ProfilePreset = *profilePreset
	}
	if *profileTrainT >= 0 {
		opts.ProfileTrainT = *profileTrainT
	}
	opts.ProfileLayers, opts.ProfileBefore, opts.ProfileLayerPrograms = *profileLayers, *profileBefore, *profileLayerPrograms
	opts.ProfileNoPrepare = *profileNoPrepare
	if *profileT > 0 {
		opts.ProfileT = *profileT
	}
	if *reps > 0 {
		opts.Reps = *reps
	}
	opts.Pprof = *pprofOut
	if *precisions != "" {
		opts.Precisions = strings.Split(*precisions, ",")
	}
	if *speedT != "" {
		opts.SpeedT = nil
		for _, f := range strings.Split(*speedT, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 16 {
				fmt.Fprintf(stderr, "%s: -speed-t %q: %q is not a length ≥ 16\n", name, *speedT, f)
				return 2
			}
			opts.SpeedT = append(opts.SpeedT, n)
		}
	}
	copts, err := parseClientOptions(*clientOpts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: -client-options: %v\n", name, err)
		return 2
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	logFile, err := os.OpenFile(filepath.Join(*out, "bench.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	defer logFile.Close()
	log := zerolog.New(zerolog.MultiLevelWriter(logFile, zerolog.ConsoleWriter{Out: stderr, NoColor: true, TimeFormat: "15:04:05"})).
		With().Timestamp().Logger()
	if *compileCache != "" {
		err := xla.ConfigureProgramCache(xla.ProgramCache{Dir: *compileCache, Log: log.With().Str("component", "compile").Logger()})
		if err != nil {
			fmt.Fprintf(stderr, "%s: -compile-cache: %v\n", name, err)
			return 1
		}
	}
	res, err := gpubench.Run(ctx, opts, copts, log)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	code := 0
	for _, s := range res.Stages {
		fmt.Fprintf(stdout, "%-9s %-8s %6.1fs %s\n", s.Name, s.Status, s.Seconds, s.Error)
		if s.Status != gpubench.StatusOK {
			code = 1
		}
	}
	fmt.Fprintf(stdout, "results: %s\n", filepath.Join(*out, "results.json"))
	return code
}

// parseClientOptions reads `k=v,…`: true/false as bools, integers as int64, other
// numbers as float32, the rest as strings (nil for an empty list).
func parseClientOptions(s string) (map[string]any, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	m := map[string]any{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: want key=value", kv)
		}
		if b, err := strconv.ParseBool(v); err == nil {
			m[k] = b
		} else if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			m[k] = n
		} else if f, err := strconv.ParseFloat(v, 32); err == nil {
			m[k] = float32(f)
		} else {
			m[k] = v
		}
	}
	return m, nil
}
