package xla

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
)

// BenchmarkDistillChunk compares, for one chunk of n positions, the loss-side cost of
// the distillation modes: sampled_token (the log-prob of the sampled token and its
// gradient in the logits, what the trainer does today), topk (the teacher's top k by
// teacherTopK, then distillTopK and its gradient) and full. The model's forward and
// backward, the same in every mode, are left out: the ratios are the modes' extra
// cost. Run with -bench DistillChunk (HINDSIGHT_TEST_BACKEND picks the backend).
func BenchmarkDistillChunk(b *testing.B) {
	backend := newTestBackend(b)
	const n = 64
	for _, vocab := range []int{4096, 32768} {
		rng := rand.New(rand.NewPCG(1, uint64(vocab)))
		z, tz := make([]float32, n*vocab), make([]float32, n*vocab)
		for i := range z {
			z[i], tz[i] = float32(2*rng.NormFloat64()), float32(2*rng.NormFloat64())
		}
		targets := make([]int32, n)
		for i := range targets {
			targets[i] = int32(rng.IntN(vocab))
		}
		zt := tensors.FromFlatDataAndDimensions(z, n, vocab)
		tt := tensors.FromFlatDataAndDimensions(tz, n, vocab)
		yt := tensors.FromFlatDataAndDimensions(targets, n)
		cfg := credit.DefaultDistillConfig()
		modes := []struct {
			name string
			fn   func(in []*Node) []*Node
		}{
			{"sampled_token", func(in []*Node) []*Node {
				logits, y := in[0], in[2]
				g := logits.Graph()
				hit := Equal(Iota(g, shapes.Make(dtypes.Int32, n, vocab), 1), BroadcastToDims(ExpandAxes(y, -1), n, vocab))
				l := Sub(ReduceSum(Where(hit, logits, ZerosLike(logits)), 1), rowLogSumExp(logits))
				loss := ReduceAllSum(l)
				return []*Node{loss, Gradient(loss, logits)[0]}
			}},
			{"topk100", func(in []*Node) []*Node {
				ids, lp, tail := teacherTopK(in[1], 100)
				loss := ReduceAllSum(distillTopK(cfg, in[0], ids, lp, tail))
				return []*Node{loss, Gradient(loss, in[0])[0]}
			}},
			{"full", func(in []*Node) []*Node {
				teacher := Sub(in[1], ExpandAxes(rowLogSumExp(in[1]), -1))
				loss := ReduceAllSum(distillFull(cfg, in[0], teacher))
				return []*Node{loss, Gradient(loss, in[0])[0]}
			}},
		}
		for _, m := range modes {
			b.Run(fmt.Sprintf("vocab=%d/%s", vocab, m.name), func(b *testing.B) {
				e, err := NewExec(backend, m.fn)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := e.Exec(zt, tt, yt); err != nil { // compile
					b.Fatal(err)
				}
				b.ResetTimer()
				for range b.N {
					out, err := e.Exec(zt, tt, yt)
					if err != nil {
						b.Fatal(err)
					}
					for _, o := range out {
						o.FinalizeAll()
					}
				}
			})
		}
	}
}

// BenchmarkDistillStep times whole optimizer steps (student pass, teacher pass,
// credit, chunked gradient, AdamW) in each distillation mode: sampled_token (the
// baseline), topk (k 100; the student's ids, and topk100teacher and topk100union with
// the teacher's and the union), full, and topk with TrainerOptions.TermGradNorms. Every
// mode has its own trainer, compiled by a first step; then each round runs one step
// of every mode, in an order that rotates from round to round, so a noisy machine
// slows all modes alike. Reported per mode: the median wall ms and the median
// process CPU ms (user + system, every thread) per step, and their ratios to
// sampled_token's. On a shared machine the CPU time is the steadier measure: other
// processes' load stretches wall time far more than it changes the CPU work a
// step does. The model is the small preset's shape (4 layers, hidden 256, the
// byte tokenizer's 265 ids), or with $HINDSIGHT_BENCH_DISTILL_PRESET=qwen3-0.6b that
// preset's shape (vocab 151936; full is then refused and left out). The rollout has
// $HINDSIGHT_BENCH_DISTILL_T tokens (default 1024); its second half is one hinted
// span (16 hint tokens), the shape of a sibling context over a failed response.
// Memory: the peak Go heap over the rounds (the pure-Go backend's buffers live
// there; on XLA it is not the device's memory). $HINDSIGHT_BENCH_DISTILL_LORA=r
// trains rank-r LoRA adapters instead of every weight (for the 0.6b shape on a
// small machine: no full-size optimizer moments), and $HINDSIGHT_BENCH_DISTILL_MODES
// (comma-separated names) keeps only those modes. $HINDSIGHT_BENCH_DISTILL_LAYERS=n
// keeps the preset's first n layers (its width, heads and vocabulary unchanged): the
// modes' extra cost is in the head and the teacher's distribution, not in the layers, so
// on a CPU the qwen3-0.6b shape at 2k tokens is measured with fewer layers and the ratio
// at full depth is an upper bound (docs/distillation.md#cost-of-a-step).
//
//	go test -run '^$' -bench DistillStep -benchtime 5x ./xla/
func BenchmarkDistillStep(b *testing.B) {
	backend := newTestBackend(b)
	T := envInt(b, "HINDSIGHT_BENCH_DISTILL_T", 1024)
	preset := os.Getenv("HINDSIGHT_BENCH_DISTILL_PRESET")
	if preset == "" {
		preset = "small"
	}
	vocab := tokenizer.BytesVocabSize
	if strings.HasPrefix(preset, "qwen3") {
		vocab = data.Qwen3VocabSize
	}
	mc, err := data.PresetConfig(preset, vocab)
	if err != nil {
		b.Fatal(err)
	}
	if n := envInt(b, "HINDSIGHT_BENCH_DISTILL_LAYERS", 0); n > 0 && n < mc.NumHiddenLayers {
		mc.NumHiddenLayers = n
	}
	m, err := Load(mc, newMemWeights(testWeights(mc, 81)), PrecisionF32)
	if err != nil {
		b.Fatal(err)
	}
	type mode struct {
		name  string
		mode  credit.DistillMode
		ids   credit.TopKIDs // topk's ids; "" is the default (the student's)
		split bool
		tr    *Trainer
		took  []float64 // wall ms per step
		cpu   []float64 // process CPU ms per step
		score []float64 // wall ms of the scoring passes per step (Metrics.ScoreTook)
	}
	modes := []*mode{{name: "sampled_token", mode: credit.DistillSampledToken}, {name: "topk100", mode: credit.DistillTopK}}
	if mc.VocabSize <= MaxFullVocab {
		modes = append(modes, &mode{name: "full", mode: credit.DistillFull})
	}
	modes = append(modes, &mode{name: "topk100+term_grad_norms", mode: credit.DistillTopK, split: true},
		&mode{name: "topk100teacher", mode: credit.DistillTopK, ids: credit.IDsTeacher},
		&mode{name: "topk100union", mode: credit.DistillTopK, ids: credit.IDsUnion})
	if keep := os.Getenv("HINDSIGHT_BENCH_DISTILL_MODES"); keep != "" {
		names := strings.Split(keep, ",")
		modes = slices.DeleteFunc(modes, func(md *mode) bool { return !slices.Contains(names, md.name) })
	}
	lora := LoRAConfig{Rank: envInt(b, "HINDSIGHT_BENCH_DISTILL_LORA", 0), Alpha: 16, Targets: DefaultLoRATargets()}
	if lora.Rank == 0 {
		lora = LoRAConfig{}
	}
	r := credit.Sequence{ID: "r", TaskID: "t", Tokens: testTokens(T, mc.VocabSize, 82), Sampler: make([]float64, T),
		Trainable: make([]bool, T), Reward: 1, HasReward: true,
		Hints: []credit.Hint{{InsertAt: T / 2, End: T, Tokens: testTokens(16, mc.VocabSize, 83)}}}
	for t := range T {
		r.Trainable[t], r.Sampler[t] = t > 0, -2
	}
	step := func(md *mode) time.Duration {
		// A baseline of 0.5 every step: the rollout's outcome advantage stays 0.5
		// (the running mean would otherwise reach its reward and zero the outcome
		// term), so both terms are in the loss.
		md.tr.Baselines().Task["t"] = 0.5
		t0, c0 := time.Now(), cpuTime()
		met, err := md.tr.Step(b.Context(), []credit.Sequence{r})
		if err != nil {
			b.Fatalf("%s: %v", md.name, err)
		}
		md.cpu = append(md.cpu, float64((cpuTime()-c0).Microseconds())/1000)
		md.score = append(md.score, float64(met.ScoreTook.Microseconds())/1000)
		return time.Since(t0)
	}
	for _, md := range modes {
		cfg := credit.DefaultConfig()
		cfg.Normalize, cfg.Distill.Mode = credit.NormalizeSeparate, md.mode
		if md.ids != "" {
			cfg.Distill.TopKIDs = md.ids
		}
		if md.tr, err = NewTrainer(backend, m, TrainerOptions{Credit: cfg, TermGradNorms: md.split, LoRA: lora}); err != nil {
			b.Fatal(err)
		}
		b.Logf("%s/T=%d/%s: first step (compiles) %s", preset, T, md.name, step(md).Round(time.Millisecond))
		md.cpu, md.score = md.cpu[:0], md.score[:0]
	}
	runtime.GC()
	heap := benchutil.StartHeapSampler(20 * time.Millisecond)
	b.ResetTimer()
	round := 0
	for b.Loop() {
		for i := range modes {
			md := modes[(i+round)%len(modes)]
			md.took = append(md.took, float64(step(md).Microseconds())/1000)
		}
		round++
	}
	b.StopTimer()
	peak, _ := heap.Stop()
	base, baseCPU := median(modes[0].took), median(modes[0].cpu)
	for _, md := range modes {
		ms, cpu := median(md.took), median(md.cpu)
		b.Logf("%s/T=%d/%s: median wall %.0f ms/step (%.2f× the first mode), of which scoring %.0f ms, CPU %.0f ms/step (%.2f×) over %d; wall %v; CPU %v",
			preset, T, md.name, ms, ms/base, median(md.score), cpu, cpu/baseCPU, len(md.took), md.took, md.cpu)
		b.ReportMetric(ms, "ms/"+md.name)
		b.ReportMetric(ms/base, "x/"+md.name)
		b.ReportMetric(cpu, "cpu-ms/"+md.name)
		b.ReportMetric(cpu/baseCPU, "cpu-x/"+md.name)
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

// cpuTime is the process's CPU time so far, user and system, every thread.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// median is the median of xs (xs is sorted in place).
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
