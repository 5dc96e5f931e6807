// Command score benchmarks xla.Scorer on the CPU: tokens/s of the Go model against
// the same model in PyTorch (Debian's python3-torch) in one run, with the ratio and
// the largest log-prob difference, and (-memory) peak heap as the rollout grows.
//
//	go run ./bench/score                       # small preset, 2048 tokens, vs PyTorch
//	go run ./bench/score -memory 4096,8192,16384,32768
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
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/benchutil"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

func main() {
	preset := flag.String("preset", "small", "init-model preset: tiny or small")
	n := flag.Int("tokens", 2048, "rollout length (tokens)")
	chunk := flag.Int("chunk", xla.DefaultChunk, "Scorer chunk")
	backendSpec := flag.String("backend", "", "GoMLX backend (default as hindsight: $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	python := flag.String("python", "/usr/bin/python3", "python with torch and numpy; empty to skip PyTorch")
	threads := flag.Int("threads", runtime.NumCPU(), "PyTorch threads")
	memory := flag.String("memory", "", "comma-separated rollout lengths: report peak heap per length instead (d=32, 1 layer)")
	scores := flag.Int("scores", 1<<22, "with -memory: Scorer AttentionScores budget (elements)")
	flag.Parse()
	if err := run(*preset, *n, *chunk, *backendSpec, *python, *threads, *memory, *scores); err != nil {
		fmt.Fprintln(os.Stderr, "bench/score:", err)
		os.Exit(1)
	}
}

func run(preset string, n, chunk int, backendSpec, python string, threads int, memory string, scores int) error {
	ctx := context.Background()
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return err
	}
	if memory != "" {
		return memoryRun(ctx, backendSpec, chunk, memory, scores)
	}
	tmp, err := os.MkdirTemp("", "bench-score-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	mc, err := data.InitModel(dir, data.InitOptions{Preset: preset, Tokenizer: "bytes", Seed: 1})
	if err != nil {
		return err
	}
	tokens := benchutil.Tokens(n, mc.VocabSize, 1, 2)
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	s, err := xla.NewScorer(backend, m, xla.ScorerOptions{Chunk: chunk})
	if err != nil {
		return err
	}
	// Warm-up compiles the executables; then the best of 3.
	goLP, c, err := s.Score(ctx, tokens)
	if err != nil {
		return err
	}
	c.Close()
	best := math.Inf(1)
	for range 3 {
		t0 := time.Now()
		_, c, err := s.Score(ctx, tokens)
		if err != nil {
			return err
		}
		best = min(best, time.Since(t0).Seconds())
		c.Close()
	}
	goTPS := float64(n) / best
	fmt.Printf("model: %s preset, %d parameters, %d tokens, chunk %d, %d CPUs\n", preset, m.NumParameters(), n, s.Chunk(), runtime.NumCPU())
	fmt.Printf("go (%s):  %8.0f tokens/s\n", xla.ResolveBackend(backendSpec, ""), goTPS)
	if python == "" {
		return nil
	}
	tokJSON, _ := json.Marshal(tokens)
	if err := os.WriteFile(filepath.Join(dir, "tokens.json"), tokJSON, 0o644); err != nil {
		return err
	}
	script := filepath.Join(benchutil.CallerDir("bench/score"), "torch_score.py")
	cmd := exec.Command(python, script, dir, strconv.Itoa(threads))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pytorch: %w", err)
	}
	var ref struct {
		TokensPerSecond float64   `json:"tokens_per_second"`
		LogProbs        []float64 `json:"logprobs"`
		Torch           string    `json:"torch"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		return fmt.Errorf("pytorch output: %w", err)
	}
	var worst float64
	for i, want := range ref.LogProbs {
		worst = math.Max(worst, math.Abs(float64(goLP[i+1])-want))
	}
	fmt.Printf("pytorch %s (%d threads, no_grad, one causal pass): %8.0f tokens/s\n", ref.Torch, threads, ref.TokensPerSecond)
	fmt.Printf("ratio go/pytorch: %.2f; max |Δ log-prob| %.2g\n", goTPS/ref.TokensPerSecond, worst)
	return nil
}

// memoryRun scores rollouts of growing length with a d=32, 1-layer model and
// reports peak heap minus the KV cache (two copies live during a step).
func memoryRun(ctx context.Context, backendSpec string, chunk int, lengths string, scores int) error {
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-score-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	mc, err := data.PresetConfig("tiny", 265)
	if err != nil {
		return err
	}
	mc.HiddenSize, mc.NumHiddenLayers, mc.NumAttentionHeads, mc.NumKeyValueHeads, mc.HeadDim, mc.IntermediateSize = 32, 1, 4, 2, 8, 64
	ws, err := data.InitWeights(mc, 1)
	if err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(tmp, "model.safetensors"), ws, nil); err != nil {
		return err
	}
	sd, err := safetensors.OpenDir(tmp)
	if err != nil {
		return err
	}
	m, err := xla.Load(mc, sd, xla.PrecisionF32)
	sd.Close()
	if err != nil {
		return err
	}
	s, err := xla.NewScorer(backend, m, xla.ScorerOptions{Chunk: chunk, AttentionScores: scores})
	if err != nil {
		return err
	}
	fmt.Printf("d=32, 1 layer, chunk ≤ %d, attention-score budget %d floats\n", s.Chunk(), scores)
	fmt.Printf("%8s %12s %12s %14s %10s\n", "tokens", "peak heap", "KV cache", "peak − 2×KV", "tokens/s")
	for _, f := range strings.Split(lengths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		tokens := benchutil.Tokens(n, mc.VocabSize, 1, 2)
		runtime.GC()
		heap := benchutil.StartHeapSampler(5 * time.Millisecond)
		t0 := time.Now()
		_, c, err := s.Score(ctx, tokens)
		took := time.Since(t0)
		_, peak := heap.Stop()
		if err != nil {
			return err
		}
		p := int64(peak) - int64(heap.Base.HeapInuse)
		kv := c.Bytes()
		fmt.Printf("%8d %10.1f MB %10.1f MB %12.1f MB %10.0f\n", n, mb(p), mb(kv), mb(p-2*kv), float64(n)/took.Seconds())
		c.Close()
	}
	return nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }
