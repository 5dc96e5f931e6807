// Command precision measures model.precision bf16 against f32 in one run: scoring
// tokens/s, training-step tokens/s, peak memory and the log-prob difference, on the
// same weights (a bfloat16 model directory, so both precisions start from the same
// values). Each precision runs in a child process of its own (the command re-execs
// itself), so that each peak RSS is that precision's alone; the two alternate
// -rounds times and the best of each is kept.
//
//	go run ./bench/precision                                 # small preset, XLA CPU
//	go run ./bench/precision -preset qwen3-0.6b -tokens 1024 -train-tokens 0 -rounds 1
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

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// result is what a child reports.
type result struct {
	Precision      string    `json:"precision"`
	Parameters     int       `json:"parameters"`
	ScoreSeconds   float64   `json:"score_seconds"` // best of -runs
	ScorePeakRSS   int64     `json:"score_peak_rss_bytes"`
	TrainSeconds   float64   `json:"train_seconds"` // best of -runs, one step
	TrainPeakRSS   int64     `json:"train_peak_rss_bytes"`
	TrainStateByte int64     `json:"train_state_bytes"` // xla.StateBytes().Total()
	LoadedRSS      int64     `json:"loaded_rss_bytes"`  // resident after loading the weights
	LogProbs       []float32 `json:"logprobs"`
}

func main() {
	preset := flag.String("preset", "small", "init-model preset (data.Presets)")
	tokens := flag.Int("tokens", 1024, "scored rollout length (tokens)")
	trainTokens := flag.Int("train-tokens", 256, "trained rollout length (tokens); 0 skips training")
	chunk := flag.Int("chunk", 256, "scorer and training chunk")
	runs := flag.Int("runs", 3, "timed repetitions per child (best kept)")
	rounds := flag.Int("rounds", 2, "f32/bf16 child pairs, alternating")
	backendSpec := flag.String("backend", "xla-cpu", "GoMLX backend")
	one := flag.String("one", "", "internal: run one precision on -dir and print its result as JSON")
	dir := flag.String("dir", "", "internal: the model directory")
	flag.Parse()
	var err error
	if *one != "" {
		err = child(xla.Precision(*one), *dir, *backendSpec, *tokens, *trainTokens, *chunk, *runs)
	} else {
		err = parent(*preset, *backendSpec, *tokens, *trainTokens, *chunk, *runs, *rounds)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench/precision:", err)
		os.Exit(1)
	}
}

func parent(preset, backendSpec string, tokens, trainTokens, chunk, runs, rounds int) error {
	tmp, err := os.MkdirTemp("", "bench-precision-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	if _, err := data.InitModel(dir, data.InitOptions{Preset: preset, Tokenizer: "bytes", Seed: 1, Dtype: "bfloat16"}); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	best := map[string]*result{}
	for r := range rounds {
		for _, p := range []string{"f32", "bf16"} {
			cmd := exec.Command(self, "-one", p, "-dir", dir, "-backend", backendSpec, "-tokens", strconv.Itoa(tokens),
				"-train-tokens", strconv.Itoa(trainTokens), "-chunk", strconv.Itoa(chunk), "-runs", strconv.Itoa(runs))
			cmd.Stderr = os.Stderr
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("%s child: %w", p, err)
			}
			var res result
			if err := json.Unmarshal(out, &res); err != nil {
				return fmt.Errorf("%s child output: %w", p, err)
			}
			fmt.Fprintf(os.Stderr, "round %d %s: score %.3fs, train %.3fs, peak RSS score %s train %s\n", r+1, p, res.ScoreSeconds, res.TrainSeconds, gib(res.ScorePeakRSS), gib(res.TrainPeakRSS))
			b := best[p]
			if b == nil {
				best[p] = &res
				continue
			}
			b.ScoreSeconds, b.TrainSeconds = min(b.ScoreSeconds, res.ScoreSeconds), min(b.TrainSeconds, res.TrainSeconds)
			b.ScorePeakRSS, b.TrainPeakRSS = min(b.ScorePeakRSS, res.ScorePeakRSS), min(b.TrainPeakRSS, res.TrainPeakRSS)
		}
	}
	f, h := best["f32"], best["bf16"]
	maxD, meanD := 0.0, 0.0
	for i := 1; i < len(f.LogProbs); i++ {
		d := math.Abs(float64(f.LogProbs[i]) - float64(h.LogProbs[i]))
		maxD, meanD = max(maxD, d), meanD+d
	}
	meanD /= float64(len(f.LogProbs) - 1)
	fmt.Printf("precision bench: %s preset (%d parameters), backend %s, %d CPUs, score %d tokens, train %d tokens, chunk %d, best of %d×%d\n",
		preset, f.Parameters, backendSpec, runtime.NumCPU(), tokens, trainTokens, chunk, rounds, runs)
	fmt.Printf("| | f32 | bf16 | bf16/f32 |\n|---|---|---|---|\n")
	row := func(name string, a, b float64, unit func(float64) string) {
		fmt.Printf("| %s | %s | %s | %.2f× |\n", name, unit(a), unit(b), b/a)
	}
	tps := func(x float64) string { return fmt.Sprintf("%.0f tokens/s", x) }
	g := func(x float64) string { return gib(int64(x)) }
	row("scoring", float64(tokens)/f.ScoreSeconds, float64(tokens)/h.ScoreSeconds, tps)
	row("resident after load", float64(f.LoadedRSS), float64(h.LoadedRSS), g)
	row("scoring peak RSS", float64(f.ScorePeakRSS), float64(h.ScorePeakRSS), g)
	if trainTokens > 0 {
		row("train step", float64(trainTokens)/f.TrainSeconds, float64(trainTokens)/h.TrainSeconds, tps)
		row("train peak RSS", float64(f.TrainPeakRSS), float64(h.TrainPeakRSS), g)
		row("trainer state (StateBytes)", float64(f.TrainStateByte), float64(h.TrainStateByte), g)
	}
	fmt.Printf("bf16 vs f32 log-probs over %d tokens: max |Δ| %.4f, mean |Δ| %.4f nats\n", tokens, maxD, meanD)
	return nil
}

func child(p xla.Precision, dir, backendSpec string, tokens, trainTokens, chunk, runs int) error {
	ctx := context.Background()
	backend, err := xla.NewBackend(xla.ResolveBackend(backendSpec, ""))
	if err != nil {
		return err
	}
	if err := p.CheckBackend(backend); err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{Precision: p})
	if err != nil {
		return err
	}
	res := result{Precision: string(p), Parameters: m.NumParameters()}
	s, err := xla.NewScorer(backend, m, xla.ScorerOptions{Chunk: chunk})
	if err != nil {
		return err
	}
	seq := benchutil.Tokens(tokens, m.Config.VocabSize, 1, 2)
	lp, c, err := s.Score(ctx, seq) // compiles, and places the weights
	if err != nil {
		return err
	}
	c.Close()
	lp[0] = 0 // NaN (no prediction of the first token), which JSON cannot hold
	res.LogProbs, res.LoadedRSS = lp, procStatus("VmRSS:")
	resetPeak()
	res.ScoreSeconds = math.Inf(1)
	for range runs {
		t0 := time.Now()
		_, c, err := s.Score(ctx, seq)
		if err != nil {
			return err
		}
		res.ScoreSeconds = min(res.ScoreSeconds, time.Since(t0).Seconds())
		c.Close()
	}
	res.ScorePeakRSS = procStatus("VmHWM:")
	if trainTokens > 0 {
		tr, err := xla.NewTrainer(backend, m, xla.TrainerOptions{Chunk: chunk, Scorer: xla.ScorerOptions{Chunk: chunk},
			Optimizer: xla.AdamWConfig{LR: 1e-5, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1}})
		if err != nil {
			return err
		}
		r := rollout(trainTokens, m.Config.VocabSize)
		met, err := tr.Step(ctx, []credit.Sequence{r}) // compiles
		if err != nil {
			return err
		}
		if !met.Updated || met.Tokens != trainTokens {
			return fmt.Errorf("train step: updated %v, %d gradient tokens: the time would not be a whole step", met.Updated, met.Tokens)
		}
		res.TrainStateByte = tr.StateBytes().Total()
		resetPeak()
		res.TrainSeconds = math.Inf(1)
		for range runs {
			t0 := time.Now()
			if _, err := tr.Step(ctx, []credit.Sequence{r}); err != nil {
				return err
			}
			res.TrainSeconds = min(res.TrainSeconds, time.Since(t0).Seconds())
		}
		res.TrainPeakRSS = procStatus("VmHWM:")
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// rollout is a T-token rollout whose every token after the first is trainable,
// with a reward and sampler log-probs, and one hint over its second quarter (so a
// step runs the student, teacher and gradient passes).
func rollout(T, vocab int) credit.Sequence {
	r := credit.Sequence{ID: "r", TaskID: "t", Tokens: benchutil.Tokens(T, vocab, 3, 4), Sampler: make([]float64, T),
		Trainable: make([]bool, T), Reward: 1, HasReward: true,
		Hints: []credit.Hint{{InsertAt: T / 4, End: T / 2, Tokens: benchutil.Tokens(16, vocab, 5, 6)}}}
	for t := range T {
		r.Trainable[t], r.Sampler[t] = t > 0, -2
	}
	r.Sampler[0] = math.NaN()
	return r
}

// resetPeak resets VmHWM to the current RSS.
func resetPeak() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// procStatus reads a kB field of /proc/self/status in bytes; 0 if unreadable.
func procStatus(field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func gib(b int64) string { return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30)) }
