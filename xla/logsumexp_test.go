package xla

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// TestVocabLogSumExpFloat64: at a Qwen-sized vocabulary (152,064) the softmax
// denominator matches a float64 Go reference to float32 rounding of the result
// (≤ 2e-6 nats at |lse| ≈ 13), summed in float32 32 entries at a time and the
// blocks in float64; the same sum taken in float32 at once, measured beside it, is
// what the float64 accumulation replaced. Rows: normal logits; one large logit
// (one block dominates); whole blocks of −Inf (a masked vocabulary, as the
// distillation tail's); every logit equal; and SmolLM2's vocabulary (49,152) and a
// prime vocabulary (65,537: blocks of 1).
func TestVocabLogSumExpFloat64(t *testing.T) {
	backend := newTestBackend(t)
	rng := rand.New(rand.NewPCG(5, 9))
	normal := func(vocab int) []float32 {
		row := make([]float32, vocab)
		for i := range row {
			row[i] = float32(rng.NormFloat64() * 2)
		}
		return row
	}
	const qwen = 152064
	peaked := normal(qwen)
	peaked[77777] = 40
	masked := normal(qwen)
	for i := 0; i < qwen; i += 64 {
		for j := i; j < i+32; j++ {
			masked[j] = float32(math.Inf(-1))
		}
	}
	flat := make([]float32, qwen)
	for i := range flat {
		flat[i] = 3.25
	}
	cases := []struct {
		name string
		rows [][]float32
	}{
		{"qwen normal", [][]float32{normal(qwen), normal(qwen), normal(qwen), normal(qwen)}},
		{"qwen peaked, masked, flat", [][]float32{peaked, masked, flat}},
		{"smollm2", [][]float32{normal(49152), normal(49152)}},
		{"prime 65,537", [][]float32{normal(65537)}},
	}
	for _, tc := range cases {
		rows, vocab := len(tc.rows), len(tc.rows[0])
		var logits []float32
		want := make([]float64, rows)
		for r, row := range tc.rows {
			logits = append(logits, row...)
			top := math.Inf(-1)
			for _, v := range row {
				top = math.Max(top, float64(v))
			}
			s := 0.0
			for _, v := range row {
				s += math.Exp(float64(v) - top)
			}
			want[r] = top + math.Log(s)
		}
		x := tensors.FromFlatDataAndDimensions(logits, 1, rows, vocab)
		run := func(f func(*Node) *Node) []float32 {
			out, err := ExecOnce(backend, f, x)
			require.NoError(t, err)
			return tensors.MustCopyFlatData[float32](out)
		}
		got := run(vocabLogSumExp)
		f32 := run(func(l *Node) *Node { // the float32 sum, as before float64
			m := StopGradient(ReduceAndKeep(l, ReduceMax, 2))
			return Add(Log(ReduceSum(Exp(Sub(l, m)), 2)), Squeeze(m, 2))
		})
		var errGot, errF32 float64
		for r := range rows {
			errGot = math.Max(errGot, math.Abs(float64(got[r])-want[r]))
			errF32 = math.Max(errF32, math.Abs(float64(f32[r])-want[r]))
		}
		t.Logf("%s: max |error| vs float64 reference: blocked sum %.2g, float32 sum %.2g nats", tc.name, errGot, errF32)
		require.LessOrEqual(t, errGot, 2e-6, tc.name)
	}
}

// TestTargetLogProbs: log-probs of chosen targets against a float64 Go log-softmax,
// and the gradient of their sum against the float64 one (softmax − one-hot).
func TestTargetLogProbs(t *testing.T) {
	backend := newTestBackend(t)
	const seq, vocab = 5, 300
	rng := rand.New(rand.NewPCG(3, 4))
	logits := make([]float32, seq*vocab)
	for i := range logits {
		logits[i] = float32(rng.NormFloat64() * 3)
	}
	targets := []int32{0, 299, 17, 17, 150}
	e := MustNewExec(backend, func(l, tg *Node) (*Node, *Node) {
		lp := targetLogProbs(l, tg)
		return lp, Gradient(ReduceAllSum(lp), l)[0]
	})
	defer e.Finalize()
	out, err := e.Exec(tensors.FromFlatDataAndDimensions(logits, 1, seq, vocab), tensors.FromFlatDataAndDimensions(targets, 1, seq))
	require.NoError(t, err)
	got := tensors.MustCopyFlatData[float32](out[0])
	grad := tensors.MustCopyFlatData[float32](out[1])
	for i, tg := range targets {
		row := logits[i*vocab : (i+1)*vocab]
		s := 0.0
		for _, v := range row {
			s += math.Exp(float64(v))
		}
		lse := math.Log(s)
		require.InDelta(t, float64(row[tg])-lse, float64(got[i]), 2e-6, "position %d", i)
		for v := range vocab {
			want := -math.Exp(float64(row[v]) - lse)
			if int32(v) == tg {
				want++
			}
			require.InDelta(t, want, float64(grad[i*vocab+v]), 1e-6, "gradient at position %d, id %d", i, v)
		}
	}
}
