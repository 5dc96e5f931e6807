package xla

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
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
