package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// trainResult is one way of running a full-training step (truncated backprop,
// AdamW) of a T-token rollout: the first step (compiles included) and the warm
// steps after it.
type trainResult struct {
	Mode              string    `json:"mode"`
	XLACompiles       int64     `json:"xla_compiles"`
	XLACompileSeconds float64   `json:"xla_compile_seconds"` // wall, the plugin's compiles in the first step
	FirstSeconds      float64   `json:"first_step_seconds"`
	FirstCPUSeconds   float64   `json:"first_step_cpu_seconds"`
	WarmSeconds       float64   `json:"warm_step_seconds"`     // mean
	WarmCPUSeconds    float64   `json:"warm_step_cpu_seconds"` // mean
	Losses            []float64 `json:"losses"`
	GradNorms         []float64 `json:"grad_norms"`
}

// trainMode runs steps training steps of a fresh Trainer over m (the layer
// programs or not) on tokens. The model's weights change with each step, so a
// comparison of losses needs a fresh model per mode (-train-mode in separate
// processes, or the same process on a model opened again).
func trainMode(ctx context.Context, backend backends.Backend, m *xla.Model, tokens []int32, layers bool, steps int) (trainResult, error) {
	c := credit.DefaultConfig()
	c.Baseline = credit.BaselineNone
	opts := xla.TrainerOptions{Chunk: xla.DefaultChunkTrain, Backprop: xla.BackpropTruncated, Credit: c, Optimizer: xla.DefaultAdamW(),
		Scorer: xla.ScorerOptions{LayerPrograms: layers}}
	name := "unrolled"
	if layers {
		name = "layer programs"
	}
	res := trainResult{Mode: name}
	tr, err := xla.NewTrainer(backend, m, opts)
	if err != nil {
		return res, err
	}
	T := len(tokens)
	r := credit.Sequence{ID: "bench", TaskID: "bench", Tokens: tokens, Sampler: make([]float64, T), Trainable: make([]bool, T), Reward: 1, HasReward: true}
	for t := range T {
		r.Trainable[t], r.Sampler[t] = t > 0, -2
	}
	r.Sampler[0] = math.NaN()
	for i := range steps {
		k0, t0, c0 := xla.CompileSnapshot(), time.Now(), benchutil.CPUTime()
		met, err := tr.Step(ctx, []credit.Sequence{r})
		if err != nil {
			return res, fmt.Errorf("%s: step %d: %w", name, i+1, err)
		}
		wall, cpu := time.Since(t0).Seconds(), (benchutil.CPUTime() - c0).Seconds()
		res.Losses, res.GradNorms = append(res.Losses, met.Loss), append(res.GradNorms, met.GradNorm)
		if i == 0 {
			k1 := xla.CompileSnapshot()
			res.FirstSeconds, res.FirstCPUSeconds = wall, cpu
			res.XLACompiles, res.XLACompileSeconds = k1.Compiled-k0.Compiled, (k1.CompileTime - k0.CompileTime).Seconds()
			continue
		}
		res.WarmSeconds += wall / float64(steps-1)
		res.WarmCPUSeconds += cpu / float64(steps-1)
	}
	return res, nil
}

// printTrain prints the training rows.
func printTrain(name string, T int, rs []trainResult) {
	fmt.Printf("\n%s, training step (full, truncated backprop, AdamW) on %d tokens\n\n", name, T)
	fmt.Println("| program | XLA compiles (wall s) | first step CPU-s (wall) | warm step CPU-s (wall) | first − warm, CPU-s | losses | gradient norms |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Printf("| %s | %d (%.1f) | %.1f (%.1f) | %.2f (%.1f) | %.1f | %.6g | %.6g |\n", r.Mode, r.XLACompiles, r.XLACompileSeconds,
			r.FirstCPUSeconds, r.FirstSeconds, r.WarmCPUSeconds, r.WarmSeconds, r.FirstCPUSeconds-r.WarmCPUSeconds, r.Losses, r.GradNorms)
	}
}
