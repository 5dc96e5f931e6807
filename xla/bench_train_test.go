package xla

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
)

// BenchmarkTrainBackprop compares the three Backprop modes on one step of the tiny
// model over a $HINDSIGHT_BENCH_BACKPROP_T-token rollout (default 2048) at chunk 64:
// tokens/s, the three in one process so that their ratios are fair on a noisy
// machine. (Memory is not reported: after the compiling step the pure-Go backend
// serves the step from its buffer pools, so the Go heap barely moves.)
//
//	go test -run '^$' -bench TrainBackprop -benchtime 2x ./xla/
func BenchmarkTrainBackprop(b *testing.B) {
	backend := newTestBackend(b)
	T := envInt(b, "HINDSIGHT_BENCH_BACKPROP_T", 2048)
	for _, mode := range []Backprop{BackpropTruncated, BackpropExact, BackpropFull} {
		b.Run(fmt.Sprintf("T=%d/%s", T, mode), func(b *testing.B) {
			m := testModel(b, tinyFields(map[string]any{"max_position_embeddings": 131072}), 71)
			tr, err := NewTrainer(backend, m, TrainerOptions{Chunk: 64, Scorer: ScorerOptions{Chunk: 64}, Backprop: mode})
			if err != nil {
				b.Fatal(err)
			}
			r := credit.Sequence{ID: "r", Tokens: testTokens(T, m.Config.VocabSize, 72), Sampler: make([]float64, T),
				Trainable: make([]bool, T), Reward: 1, HasReward: true}
			for t := range T {
				r.Trainable[t], r.Sampler[t] = t > 0, -2
			}
			benchSteps(b, tr, r)
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// benchSteps runs one step on r to compile, then times b.N steps on it.
func benchSteps(b *testing.B, tr *Trainer, r credit.Sequence) {
	if _, err := tr.Step(b.Context(), []credit.Sequence{r}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := tr.Step(b.Context(), []credit.Sequence{r}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrainStep times whole optimizer steps (student pass, live-teacher hinted
// pass, credit, chunked gradient, AdamW) of the tiny model (d = 64, 2 layers, byte
// vocabulary) on one 256-token rollout, and reports trained tokens per second.
//
//	go test -run '^$' -bench TrainStep -benchtime 10x ./xla/
func BenchmarkTrainStep(b *testing.B) {
	backend := newTestBackend(b)
	const T = 256
	for _, chunk := range []int{64, 256} {
		b.Run(fmt.Sprintf("T=%d/chunk=%d", T, chunk), func(b *testing.B) {
			m := testModel(b, tinyFields(nil), 51)
			tr, err := NewTrainer(backend, m, TrainerOptions{Chunk: chunk, Scorer: ScorerOptions{Chunk: chunk},
				Credit: credit.DefaultConfig(), Optimizer: DefaultAdamW(), TeacherModel: DefaultTeacherModel()})
			if err != nil {
				b.Fatal(err)
			}
			r := credit.Sequence{ID: "r", TaskID: "t", Tokens: testTokens(T, m.Config.VocabSize, 52), Sampler: make([]float64, T),
				Trainable: make([]bool, T), Reward: 1, HasReward: true,
				Hints: []credit.Hint{{InsertAt: 128, End: 192, Tokens: testTokens(16, m.Config.VocabSize, 53)}}}
			trainable := 0
			for t := range T {
				r.Sampler[t] = math.NaN()
				if t >= 16 {
					r.Trainable[t], r.Sampler[t] = true, -2
					trainable++
				}
			}
			benchSteps(b, tr, r)
			b.ReportMetric(float64(trainable*b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "positions/s")
		})
	}
}

// BenchmarkTrainLongRollout runs one optimizer step on one long rollout
// ($HINDSIGHT_BENCH_LONG_T tokens, default 32768) of the tiny model at two training
// chunk sizes (both within the default attention-score budget at 32k) and reports
// the peak Go heap during the step (the pure-Go backend's buffers live there): the
// KV cache grows with T, activations with chunk × T.
//
//	go test -run '^$' -bench TrainLongRollout -benchtime 1x -timeout 30m ./xla/
func BenchmarkTrainLongRollout(b *testing.B) {
	backend := newTestBackend(b)
	T := envInt(b, "HINDSIGHT_BENCH_LONG_T", 32768)
	for _, chunk := range []int{64, 128} {
		b.Run(fmt.Sprintf("T=%d/chunk=%d", T, chunk), func(b *testing.B) {
			m := testModel(b, tinyFields(map[string]any{"max_position_embeddings": 131072}), 61)
			tr, err := NewTrainer(backend, m, TrainerOptions{Chunk: chunk, Scorer: ScorerOptions{Chunk: chunk}})
			if err != nil {
				b.Fatal(err)
			}
			r := credit.Sequence{ID: "long", Tokens: testTokens(T, m.Config.VocabSize, 62), Sampler: make([]float64, T),
				Trainable: make([]bool, T), Reward: 1, HasReward: true,
				Hints: []credit.Hint{{InsertAt: T - 512, End: T - 256, Tokens: testTokens(16, m.Config.VocabSize, 63)}}}
			for t := range T {
				r.Trainable[t], r.Sampler[t] = t > 0, -2
			}
			runtime.GC()
			heap := benchutil.StartHeapSampler(20 * time.Millisecond)
			b.ResetTimer()
			for b.Loop() {
				if _, err := tr.Step(b.Context(), []credit.Sequence{r}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			peak, _ := heap.Stop()
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(peak-heap.Base.HeapAlloc)/(1<<20), "step-heap-MiB")
			b.ReportMetric(float64(T*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkTrainChunkPeak32k measures the peak Go heap of the training pass's most
// expensive chunk, the last one of a 32768-token rollout (it attends to the whole
// KV cache), at two chunk sizes, for the tiny model on the pure-Go backend. The
// cache is filled with zeros instead of a 32k scoring pass (which takes minutes on
// CPU); memory does not depend on its values. Reported: the KV cache and the peak
// heap above it while the chunk's loss and gradient run.
//
//	go test -run '^$' -bench TrainChunkPeak32k -benchtime 1x ./xla/
func BenchmarkTrainChunkPeak32k(b *testing.B) {
	backend := newTestBackend(b)
	const T = 32768
	for _, chunk := range []int{64, 128} {
		b.Run(fmt.Sprintf("T=%d/chunk=%d", T, chunk), func(b *testing.B) {
			m := testModel(b, tinyFields(map[string]any{"max_position_embeddings": 131072}), 71)
			s, err := NewScorer(backend, m, ScorerOptions{Chunk: chunk, BucketAttention: true})
			if err != nil {
				b.Fatal(err)
			}
			p, err := newGradPass(backend, m)
			if err != nil {
				b.Fatal(err)
			}
			cache, err := s.newCache(T)
			if err != nil {
				b.Fatal(err)
			}
			defer cache.Close()
			cache.Len = T
			tokens := testTokens(chunk, m.Config.VocabSize, 72)
			off := T - chunk
			w := make([]float32, chunk)
			for i := range w {
				w[i] = 1.0 / T
			}
			acc := p.zeroGrads()
			runtime.GC()
			heap := benchutil.StartHeapSampler(5 * time.Millisecond)
			b.ResetTimer()
			for b.Loop() {
				args := []any{
					tensors.FromFlatDataAndDimensions(tokens, 1, chunk),
					tensors.FromFlatDataAndDimensions(tokens, 1, chunk),
					tensors.FromScalar(int32(off)),
					tensors.FromFlatDataAndDimensions(w, 1, chunk),
					tensors.FromFlatDataAndDimensions(make([]float32, chunk), 1, chunk),
					tensors.FromFlatDataAndDimensions(make([]float32, chunk), 1, chunk),
				}
				args = append(args, anys(cache.layout.tensors())...)
				args = append(args, anys(acc)...)
				out, err := p.execs[BackpropTruncated].Exec(args...)
				if err != nil {
					b.Fatal(err)
				}
				for _, t := range out {
					t.FinalizeAll()
				}
			}
			b.StopTimer()
			peak, _ := heap.Stop()
			b.ReportMetric(float64(cache.Bytes())/(1<<20), "kv-MiB")
			b.ReportMetric(float64(peak-heap.Base.HeapAlloc)/(1<<20), "chunk-peak-MiB")
		})
	}
}

// envInt is the integer in the environment variable name, or def when it is unset.
func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return n
}
