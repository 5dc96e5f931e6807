package xla

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
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
// credit, chunked gradient, AdamW) in each distillation mode, in one process so
// their ratios are fair on a noisy machine: sampled_token (the baseline), topk
// (k 100), full, and topk with TrainerOptions.TermGradNorms. The model is the small
// preset's shape (4 layers, hidden 256, the byte tokenizer's 265 ids), or with
// $HINDSIGHT_BENCH_DISTILL_PRESET=qwen3-0.6b that preset's shape (vocab 151936;
// full is then refused and left out); one rollout of $HINDSIGHT_BENCH_DISTILL_T
// tokens (default 1024) whose second half is one hinted span (16 hint tokens), the
// shape of a sibling context over a failed response. The modes share one model, each
// with its own trainer (each step moves the weights; timing does not depend on
// them). Reported: ms per step, and the peak Go heap during the steps (the pure-Go
// backend's buffers live there; on XLA the device memory is not in it).
//
//	go test -run '^$' -bench DistillStep -benchtime 3x ./xla/
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
	m, err := LoadModel(mc, newMemWeights(testWeights(mc, 81)))
	if err != nil {
		b.Fatal(err)
	}
	type mode struct {
		name  string
		mode  credit.DistillMode
		split bool
	}
	modes := []mode{{"sampled_token", credit.DistillSampledToken, false}, {"topk100", credit.DistillTopK, false}}
	if mc.VocabSize <= MaxFullVocab {
		modes = append(modes, mode{"full", credit.DistillFull, false})
	}
	modes = append(modes, mode{"topk100+term_grad_norms", credit.DistillTopK, true})
	for _, md := range modes {
		b.Run(fmt.Sprintf("%s/T=%d/%s", preset, T, md.name), func(b *testing.B) {
			cfg := credit.DefaultConfig()
			cfg.Normalize, cfg.Distill.Mode = credit.NormalizeSeparate, md.mode
			tr, err := NewTrainer(backend, m, TrainerOptions{Credit: cfg, TermGradNorms: md.split})
			if err != nil {
				b.Fatal(err)
			}
			r := credit.Rollout{ID: "r", TaskID: "t", Tokens: testTokens(T, mc.VocabSize, 82), Sampler: make([]float64, T),
				Trainable: make([]bool, T), Reward: 1, HasReward: true,
				Hints: []credit.HintSpan{{Start: T / 2, End: T, Hint: testTokens(16, mc.VocabSize, 83)}}}
			for t := range T {
				r.Trainable[t], r.Sampler[t] = t > 0, -2
			}
			if _, err := tr.Step(b.Context(), []credit.Rollout{r}); err != nil { // compiles
				b.Fatal(err)
			}
			runtime.GC()
			heap := benchutil.StartHeapSampler(20 * time.Millisecond)
			b.ResetTimer()
			for b.Loop() {
				if _, err := tr.Step(b.Context(), []credit.Rollout{r}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			peak, _ := heap.Stop()
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/step")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}
