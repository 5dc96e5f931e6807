// Command score benchmarks xla.Scorer on the CPU: tokens of a batch of rollouts
// scored per CPU-second against PyTorch on the same weights and the same token ids,
// in one run, with the ratio and the largest log-prob difference, and (-memory) peak
// heap as the rollout grows.
//
//	go run ./bench/score                       # small preset, 1 × 2048 tokens, vs PyTorch
//	go run ./bench/score -model DIR -backend xla-cpu -rollouts 8 -tokens 256 \
//	    -python VENV/bin/python -peer transformers -threads 2
//	go run ./bench/score -memory 4096,8192,16384,32768
//
// hindsight scores the rollouts one after another (Scorer.Score, as the trainer
// does), or with -devices N on N devices of the backend at once, each its share one
// after another (xla-cpu: N virtual devices sharing the cores' pool, as the
// trainer's scoring pass with train.devices: N); the peer scores them as one
// [rollouts, tokens] batch: -peer reference (torch_score.py:
// xla/testdata/gen_reference.py's forward, one rollout at a time, any torch
// including Debian's) or -peer transformers (transformers_score.py:
// AutoModelForCausalLM on the whole batch, needs transformers). Each side is the
// best of 3 after a warm-up, by the wall and by the process's CPU seconds (user +
// system, every thread); the ratio is per CPU-second, which another session on a
// shared machine moves far less. It is a benchmark, not a test: nothing asserts on
// the numbers.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/benchutil"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

type options struct {
	preset, modelDir, peer string
	rollouts, tokens       int
	chunk                  int
	backendSpec, python    string
	threads                int
	devices                int
	jsonOut                string
}

func main() {
	var o options
	flag.StringVar(&o.preset, "preset", "small", "init-model preset (data.Presets), random weights; ignored with -model")
	flag.StringVar(&o.modelDir, "model", "", "a Hugging Face model `directory` to score with instead of a preset (e.g. SmolLM2 converted by scripts/real_model.py)")
	flag.StringVar(&o.peer, "peer", "reference", "the PyTorch side: reference (torch_score.py, gen_reference.py's forward) or transformers (transformers_score.py; needs transformers in -python's environment)")
	flag.IntVar(&o.rollouts, "rollouts", 1, "rollouts in the batch")
	flag.IntVar(&o.tokens, "tokens", 2048, "tokens a rollout")
	flag.IntVar(&o.chunk, "chunk", xla.DefaultChunk, "Scorer chunk")
	flag.StringVar(&o.backendSpec, "backend", "", "GoMLX backend (default as hindsight: $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "python with torch and numpy; empty to skip PyTorch")
	flag.IntVar(&o.threads, "threads", runtime.NumCPU(), "PyTorch threads")
	flag.IntVar(&o.devices, "devices", 1, "hindsight: score the rollouts on this many devices of the backend at once (xla-cpu: virtual devices sharing the cores, as train.devices), each device its share one after another")
	flag.StringVar(&o.jsonOut, "json", "", "also write both sides' timings and the log-prob difference to `FILE` (JSON)")
	memory := flag.String("memory", "", "comma-separated rollout lengths: report peak heap per length instead (d=32, 1 layer)")
	scores := flag.Int("scores", 1<<22, "with -memory: Scorer AttentionScores budget (elements)")
	flag.Parse()
	var err error
	if *memory != "" {
		err = memoryRun(context.Background(), o.backendSpec, o.chunk, *memory, *scores)
	} else {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/score:", err)
		os.Exit(1)
	}
}

// timing is one side's result: the batch's best wall and best CPU seconds.
type timing struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
}

// peerResult is what the Python peers print.
type peerResult struct {
	timing
	Torch        string      `json:"torch"`
	Transformers string      `json:"transformers,omitempty"`
	Threads      int         `json:"threads"`
	TiedHead     *bool       `json:"tied_head,omitempty"`
	LogProbs     [][]float64 `json:"logprobs,omitempty"`
}

func run(o options) error {
	scripts := map[string]string{"reference": "torch_score.py", "transformers": "transformers_score.py"}
	if scripts[o.peer] == "" {
		return fmt.Errorf("-peer %q: want reference or transformers", o.peer)
	}
	if o.rollouts < 1 || o.tokens < 2 {
		return fmt.Errorf("-rollouts %d -tokens %d: want at least 1 rollout of 2 tokens", o.rollouts, o.tokens)
	}
	ctx := context.Background()
	backendName := xla.ResolveBackend(o.backendSpec, "")
	if o.devices > 1 {
		backendName += fmt.Sprintf(",devices=%d", o.devices)
	}
	backend, err := xla.NewBackend(backendName)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-score-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	mc, name, err := modelInto(dir, o.modelDir, o.preset)
	if err != nil {
		return err
	}
	var rollouts [][]int32
	for r := range o.rollouts {
		rollouts = append(rollouts, benchutil.Tokens(o.tokens, mc.VocabSize, 1, uint64(2+r)))
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	s, err := xla.NewScorer(backend, m, xla.ScorerOptions{Chunk: o.chunk})
	if err != nil {
		return err
	}
	scorers := []*xla.Scorer{s}
	for d := 1; d < o.devices; d++ {
		sd, err := s.OnDevice(d)
		if err != nil {
			return err
		}
		scorers = append(scorers, sd)
	}
	goLP := make([][]float32, len(rollouts))
	// Device d scores rollouts d, d+devices, … one after another; the devices at once.
	pass := func() error {
		errs := make([]error, len(scorers))
		var wg sync.WaitGroup
		for d, sd := range scorers {
			wg.Go(func() {
				for i := d; i < len(rollouts); i += len(scorers) {
					lp, c, err := sd.Score(ctx, rollouts[i])
					if err != nil {
						errs[d] = err
						return
					}
					c.Close()
					goLP[i] = lp
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	// Warm-up compiles the executables; then the best of 3.
	if err := pass(); err != nil {
		return err
	}
	goT := timing{Seconds: math.Inf(1), CPUSeconds: math.Inf(1)}
	for range 3 {
		t0, c0 := time.Now(), benchutil.CPUTime()
		if err := pass(); err != nil {
			return err
		}
		goT.Seconds = min(goT.Seconds, time.Since(t0).Seconds())
		goT.CPUSeconds = min(goT.CPUSeconds, (benchutil.CPUTime() - c0).Seconds())
	}
	n := float64(o.rollouts * o.tokens)
	fmt.Printf("model: %s, %d parameters; %d × %d tokens, chunk %d, %d CPUs\n", name, m.NumParameters(), o.rollouts, o.tokens, s.Chunk(), runtime.NumCPU())
	fmt.Printf("go (%s): %8.0f tokens/s, %8.0f per CPU-s\n", backendName, n/goT.Seconds, n/goT.CPUSeconds)
	report := map[string]any{"args": os.Args[1:], "backend": backendName, "model": name, "rollouts": o.rollouts, "tokens": o.tokens, "devices": o.devices, "go": goT}
	if o.python == "" {
		return benchutil.WriteJSON(o.jsonOut, report)
	}
	tokJSON, _ := json.Marshal(map[string]any{"rollouts": rollouts})
	if err := os.WriteFile(filepath.Join(dir, "tokens.json"), tokJSON, 0o644); err != nil {
		return err
	}
	script := filepath.Join(benchutil.CallerDir("bench/score"), scripts[o.peer])
	cmd := exec.Command(o.python, script, dir, strconv.Itoa(o.threads))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("pytorch: %w", err)
	}
	var ref peerResult
	if err := json.Unmarshal(out, &ref); err != nil {
		return fmt.Errorf("pytorch output: %w", err)
	}
	if len(ref.LogProbs) != len(rollouts) {
		return fmt.Errorf("pytorch output: log-probs of %d rollouts, want %d", len(ref.LogProbs), len(rollouts))
	}
	var worst, sum float64
	var count int
	for r, lps := range ref.LogProbs {
		if len(lps) != o.tokens-1 {
			return fmt.Errorf("pytorch output: rollout %d has %d log-probs, want %d", r, len(lps), o.tokens-1)
		}
		for i, want := range lps {
			d := math.Abs(float64(goLP[r][i+1]) - want)
			worst, sum, count = math.Max(worst, d), sum+d, count+1
		}
	}
	peerName := "pytorch " + ref.Torch
	if ref.Transformers != "" {
		peerName += ", transformers " + ref.Transformers + " (one batched forward)"
	} else {
		peerName += " (gen_reference.py forward, a rollout at a time)"
	}
	if ref.TiedHead != nil {
		peerName += fmt.Sprintf(", lm_head tied to the embedding: %v", *ref.TiedHead)
	}
	fmt.Printf("%s, %d threads, no_grad, f32: %8.0f tokens/s, %8.0f per CPU-s\n", peerName, ref.Threads, n/ref.Seconds, n/ref.CPUSeconds)
	fmt.Printf("go/pytorch per CPU-second: %.2f (by the wall: %.2f); |Δ log-prob| max %.2g, mean %.2g over %d tokens\n",
		ref.CPUSeconds/goT.CPUSeconds, ref.Seconds/goT.Seconds, worst, sum/float64(count), count)
	ref.LogProbs = nil
	report["peer"] = ref
	report["ratio_per_cpu_second"] = ref.CPUSeconds / goT.CPUSeconds
	report["ratio_wall"] = ref.Seconds / goT.Seconds
	report["max_abs_logprob_diff"] = worst
	report["mean_abs_logprob_diff"] = sum / float64(count)
	return benchutil.WriteJSON(o.jsonOut, report)
}

// modelInto makes dir the model to score: links to modelDir's files (the peer reads
// tokens.json beside the weights), or a fresh init-model preset. It returns the
// model's config and a name for it.
func modelInto(dir, modelDir, preset string) (*data.ModelConfig, string, error) {
	if modelDir == "" {
		mc, err := data.InitModel(dir, data.InitOptions{Preset: preset, Tokenizer: "bytes", Seed: 1})
		return mc, preset + " preset", err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, "", err
	}
	ents, err := os.ReadDir(modelDir)
	if err != nil {
		return nil, "", err
	}
	for _, e := range ents {
		abs, err := filepath.Abs(filepath.Join(modelDir, e.Name()))
		if err != nil {
			return nil, "", err
		}
		if err := os.Symlink(abs, filepath.Join(dir, e.Name())); err != nil {
			return nil, "", err
		}
	}
	mc, err := data.LoadModelConfig(filepath.Join(dir, data.ConfigFileName))
	return mc, modelDir, err
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
