// Command generate benchmarks xla.Sampler: prefill and decode tokens/s of greedy
// generation against the same KV-cached loop in PyTorch (Debian's python3-torch) on
// the same weights, in one run, at each batch size, with the ratios and how many
// rows' tokens agree.
//
//	go run ./bench/generate                          # small preset, batch 1 and 16
//	go run ./bench/generate -backend xla-cpu -batches 1,16,64
//
// Prefill time is Generate with MaxNew 1 (the prompt but its last token, then one
// decode step); decode time is the rest of generating -new+1 tokens, so decode
// tokens/s = batch × new / (T(new+1) − T(1)). PyTorch is timed the same way. Each
// side's time is measured by the wall and by the process's CPU seconds (user +
// system, every thread); the ratios are per CPU-second, which another session on
// a shared machine moves far less. -openblas DIR runs the peer with DIR (holding
// OpenBLAS's libblas.so.3) first on LD_LIBRARY_PATH, as bench/backends does:
// Debian's torch otherwise multiplies with the reference BLAS. -json FILE keeps both
// sides' raw times and tokens (bench/generate/results/ holds the runs that
// docs/performance.md reports). It is a benchmark, not a test: nothing asserts on
// the numbers.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

func main() {
	preset := flag.String("preset", "small", "init-model preset (data.Presets), random weights; ignored with -model")
	modelDir := flag.String("model", "", "a Hugging Face model `directory` to run instead of a preset (e.g. SmolLM2 converted by scripts/real_model.py)")
	peer := flag.String("peer", "loop", "the PyTorch side: loop (torch_generate.py, a hand-written KV-cached loop) or transformers (transformers_generate.py, model.generate; needs transformers in -python's environment)")
	promptLen := flag.Int("prompt", 128, "prompt length (tokens)")
	newTokens := flag.Int("new", 128, "decoded tokens per row")
	batches := flag.String("batches", "1,16", "comma-separated batch sizes")
	backendSpec := flag.String("backend", "", "GoMLX backend (default as hindsight: $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	python := flag.String("python", "/usr/bin/python3", "python with torch and numpy; empty to skip PyTorch")
	threads := flag.Int("threads", runtime.NumCPU(), "PyTorch threads")
	openBLAS := flag.String("openblas", "", "run the PyTorch side with LD_LIBRARY_PATH=`DIR` (a directory holding OpenBLAS's libblas.so.3, e.g. from `apt-get download libopenblas0-pthread && dpkg -x`)")
	jsonOut := flag.String("json", "", "also write both sides' raw timings and tokens to `FILE` (JSON)")
	flag.Parse()
	if err := run(*preset, *modelDir, *peer, *promptLen, *newTokens, *batches, *backendSpec, *python, *threads, *openBLAS, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench/generate:", err)
		os.Exit(1)
	}
}

// timing is one batch size's result on one side: seconds by the wall and by the
// process's CPU time.
type timing struct {
	Batch             int       `json:"batch"`
	PrefillSeconds    float64   `json:"prefill_seconds"`
	DecodeSeconds     float64   `json:"decode_seconds"`
	PrefillCPUSeconds float64   `json:"prefill_cpu_seconds"`
	DecodeCPUSeconds  float64   `json:"decode_cpu_seconds"`
	Tokens            [][]int32 `json:"tokens"`
}

func run(preset, modelDir, peer string, promptLen, newTokens int, batchList, backendSpec, python string, threads int, openBLAS, jsonOut string) error {
	scripts := map[string]string{"loop": "torch_generate.py", "transformers": "transformers_generate.py"}
	if scripts[peer] == "" {
		return fmt.Errorf("-peer %q: want loop or transformers", peer)
	}
	ctx := context.Background()
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-generate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	var mc *data.ModelConfig
	if modelDir != "" {
		// The peer reads prompts.json beside the weights: link the model's files
		// into a folder of our own.
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		ents, err := os.ReadDir(modelDir)
		if err != nil {
			return err
		}
		for _, e := range ents {
			abs, _ := filepath.Abs(filepath.Join(modelDir, e.Name()))
			if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
		if mc, err = data.LoadModelConfig(filepath.Join(dir, data.ConfigFileName)); err != nil {
			return err
		}
		preset = modelDir
	} else if mc, err = data.InitModel(dir, data.InitOptions{Preset: preset, Tokenizer: "bytes", Seed: 1}); err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	s, err := xla.NewSampler(backend, m, 0)
	if err != nil {
		return err
	}
	var all [][][]int32
	for _, f := range strings.Split(batchList, ",") {
		b, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || b < 1 {
			return fmt.Errorf("-batches: %q is not a batch size", f)
		}
		var prompts [][]int32
		for r := range b {
			prompts = append(prompts, benchutil.Tokens(promptLen, mc.VocabSize, 1, uint64(r)))
		}
		all = append(all, prompts)
	}
	fmt.Printf("model: %s preset, %d parameters; prompt %d tokens, %d decoded per row, greedy; %d CPUs\n",
		preset, m.NumParameters(), promptLen, newTokens, runtime.NumCPU())
	var goRuns []timing
	for _, prompts := range all {
		r, err := goTiming(ctx, s, prompts, newTokens)
		if err != nil {
			return err
		}
		goRuns = append(goRuns, r)
		fmt.Printf("go (%s) batch %3d: %s\n", xla.ResolveBackend(backendSpec, ""), r.Batch, r.rates(promptLen, newTokens))
	}
	if python == "" {
		return benchutil.WriteJSON(jsonOut, map[string]any{"args": os.Args[1:], "go": goRuns})
	}
	raw, _ := json.Marshal(map[string]any{"batches": all})
	if err := os.WriteFile(filepath.Join(dir, "prompts.json"), raw, 0o644); err != nil {
		return err
	}
	script := filepath.Join(benchutil.CallerDir("bench/generate"), scripts[peer])
	cmd := exec.Command(python, script, dir, strconv.Itoa(threads), strconv.Itoa(newTokens))
	cmd.Stderr = os.Stderr
	if openBLAS != "" {
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+openBLAS, "OPENBLAS_NUM_THREADS="+strconv.Itoa(threads))
	}
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pytorch: %w", err)
	}
	var ref struct {
		Torch        string   `json:"torch"`
		Transformers string   `json:"transformers,omitempty"`
		Runs         []timing `json:"runs"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		return fmt.Errorf("pytorch output: %w", err)
	}
	blas := "the system libblas.so.3"
	if openBLAS != "" {
		blas = "LD_LIBRARY_PATH=" + openBLAS
	}
	if ref.Transformers != "" {
		fmt.Printf("pytorch %s, transformers %s generate (greedy, KV cache), %d threads, %s:\n", ref.Torch, ref.Transformers, threads, blas)
	} else {
		fmt.Printf("pytorch %s, %d threads, eager no_grad KV-cached loop, %s:\n", ref.Torch, threads, blas)
	}
	for i, r := range ref.Runs {
		g := goRuns[i]
		same := 0
		for j := range r.Tokens {
			if slices.Equal(r.Tokens[j], g.Tokens[j]) {
				same++
			}
		}
		fmt.Printf("pytorch batch %3d: %s\n", r.Batch, r.rates(promptLen, newTokens))
		fmt.Printf("go/pytorch batch %3d per CPU-second: prefill %.2f, decode %.2f (by the wall: %.2f, %.2f) | rows with identical tokens %d/%d\n",
			r.Batch, r.PrefillCPUSeconds/g.PrefillCPUSeconds, r.DecodeCPUSeconds/g.DecodeCPUSeconds,
			r.PrefillSeconds/g.PrefillSeconds, r.DecodeSeconds/g.DecodeSeconds, same, len(r.Tokens))
	}
	return benchutil.WriteJSON(jsonOut, map[string]any{"args": os.Args[1:], "backend": xla.ResolveBackend(backendSpec, ""), "go": goRuns, "peer": ref})
}

// goTiming times Generate with MaxNew 1 and newTokens+1, best of 3 after a
// warm-up that compiles the executables (the least wall time and, separately, the
// least CPU time).
func goTiming(ctx context.Context, s *xla.Sampler, prompts [][]int32, newTokens int) (timing, error) {
	r := timing{Batch: len(prompts)}
	var out []xla.Sample
	for _, n := range []int{1, newTokens + 1} {
		best, bestCPU := math.Inf(1), math.Inf(1)
		for range 4 {
			t0, c0 := time.Now(), benchutil.CPUTime()
			o, err := s.Generate(ctx, prompts, xla.SampleOptions{MaxNew: n})
			if err != nil {
				return r, err
			}
			best = min(best, time.Since(t0).Seconds())
			bestCPU = min(bestCPU, (benchutil.CPUTime() - c0).Seconds())
			out = o
		}
		if n == 1 {
			r.PrefillSeconds, r.PrefillCPUSeconds = best, bestCPU
		} else {
			r.DecodeSeconds, r.DecodeCPUSeconds = best-r.PrefillSeconds, bestCPU-r.PrefillCPUSeconds
		}
	}
	for _, o := range out {
		r.Tokens = append(r.Tokens, o.Tokens)
	}
	return r, nil
}

// rates are r's prefill and decode tokens per second, by the wall and per
// CPU-second.
func (r timing) rates(promptLen, newTokens int) string {
	pre, dec := float64(r.Batch*promptLen), float64(r.Batch*newTokens)
	return fmt.Sprintf("prefill %7.0f tokens/s (%7.0f per CPU-s), decode %6.1f tokens/s (%6.1f per CPU-s)",
		pre/r.PrefillSeconds, pre/r.PrefillCPUSeconds, dec/r.DecodeSeconds, dec/r.DecodeCPUSeconds)
}
