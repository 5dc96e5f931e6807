package xla

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"weak"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/stretchr/testify/require"
)

// dotCases are the contraction patterns the model uses, plus a permuted
// multi-axis one.
var dotCases = []struct {
	name           string
	lhs, rhs       []int
	lc, lb, rc, rb []int
}{
	{"projection", []int{2, 3, 5}, []int{4, 5}, []int{2}, nil, []int{1}, nil},
	{"attention_scores", []int{2, 3, 2, 2, 4}, []int{6, 2, 2, 4}, []int{4}, []int{0, 2}, []int{3}, []int{1, 2}},
	{"attention_values", []int{2, 2, 3, 2, 6}, []int{6, 2, 2, 4}, []int{4}, []int{0, 1}, []int{0}, []int{1, 2}},
	{"two_contracting_permuted", []int{3, 4, 5}, []int{5, 6, 3}, []int{2, 0}, nil, []int{0, 2}, nil},
	{"batch_last", []int{4, 3, 2}, []int{2, 5, 3, 4}, []int{1}, []int{2, 0}, []int{2}, []int{0, 3}},
}

func randFloats(n int, seed uint64) []float64 {
	rng := rand.New(rand.NewPCG(seed, 1))
	out := make([]float64, n)
	for i := range out {
		out[i] = rng.NormFloat64()
	}
	return out
}

func prod(d []int) int {
	p := 1
	for _, x := range d {
		p *= x
	}
	return p
}

// TestGEMMVJPFiniteDifferences checks the GEMM rule against central finite
// differences (float64) and against GoMLX's stock rule.
func TestGEMMVJPFiniteDifferences(t *testing.T) {
	backend := newTestBackend(t)
	for _, tc := range dotCases {
		t.Run(tc.name, func(t *testing.T) {
			a := randFloats(prod(tc.lhs), 1)
			b := randFloats(prod(tc.rhs), 2)
			var outDims []int
			// loss = Σ dot(a, b) ⊙ r for a fixed random r, so every output matters.
			lossFn := func(lhs, rhs *Node) *Node {
				out := dot(lhs, tc.lc, tc.lb, rhs, tc.rc, tc.rb)
				outDims = out.Shape().Dimensions
				r := Const(lhs.Graph(), tensors.FromFlatDataAndDimensions(randFloats(out.Shape().Size(), 3), outDims...))
				return ReduceAllSum(Mul(out, r))
			}
			gradExec := func() (ga, gb []float64) {
				e := MustNewExec(backend, func(lhs, rhs *Node) []*Node {
					loss := lossFn(lhs, rhs)
					return Gradient(loss, lhs, rhs)
				})
				defer e.Finalize()
				out := e.MustExec(tensors.FromFlatDataAndDimensions(a, tc.lhs...), tensors.FromFlatDataAndDimensions(b, tc.rhs...))
				return tensors.MustCopyFlatData[float64](out[0]), tensors.MustCopyFlatData[float64](out[1])
			}
			ga, gb := gradExec()
			gemmVJPOff.Store(true)
			sa, sb := gradExec()
			gemmVJPOff.Store(false)
			require.InDeltaSlice(t, sa, ga, 1e-12, "lhs gradient differs from the stock rule")
			require.InDeltaSlice(t, sb, gb, 1e-12, "rhs gradient differs from the stock rule")

			lossExec := MustNewExec(backend, lossFn)
			defer lossExec.Finalize()
			loss := func(a, b []float64) float64 {
				out := lossExec.MustExec(tensors.FromFlatDataAndDimensions(a, tc.lhs...), tensors.FromFlatDataAndDimensions(b, tc.rhs...))
				return tensors.MustCopyFlatData[float64](out[0])[0]
			}
			const h = 1e-6
			for _, op := range []struct {
				vals, grad []float64
			}{{a, ga}, {b, gb}} {
				for i := range op.vals {
					x := op.vals[i]
					op.vals[i] = x + h
					up := loss(a, b)
					op.vals[i] = x - h
					down := loss(a, b)
					op.vals[i] = x
					fd := (up - down) / (2 * h)
					require.InDelta(t, fd, op.grad[i], 1e-6*math.Max(1, math.Abs(fd)), "element %d", i)
				}
			}
		})
	}
}

// TestTrainingGradientHasNoBMNK builds the gradient of the tiny model's summed
// log-probs (batch 2) with respect to every weight and asserts that no node of the
// graph is as large as the [batch, M, N, K] broadcast product the stock DotGeneral
// rule builds for one of the model's matmuls. It first checks that the assertion
// fires with the stock rule, and that both rules give the same gradients.
func TestTrainingGradientHasNoBMNK(t *testing.T) {
	backend := newTestBackend(t)
	m := testModel(t, tinyFields(nil), 5)
	cfg := m.Config
	const batch, seq = 2, 32
	tokens := testTokens(batch*seq, cfg.VocabSize, 9)
	targets := testTokens(batch*seq, cfg.VocabSize, 10)

	run := func() (grads []*tensors.Tensor, offenders []string) {
		e, err := mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, tok, tgt *Node) []*Node {
			h := decoder(ctx, cfg, tok, ScalarZero(tok.Graph(), tok.DType()), chunkOnly{})
			loss := ReduceAllSum(tokenLogProbs(ctx, cfg, h, tgt))
			var params []*Node
			for v := range ctx.IterVariables() {
				params = append(params, v.ValueGraph(tok.Graph()))
			}
			return Gradient(loss, params...)
		})
		require.NoError(t, err)
		defer e.Finalize()
		out, g, err := e.ExecWithGraph(tensors.FromFlatDataAndDimensions(tokens, batch, seq), tensors.FromFlatDataAndDimensions(targets, batch, seq))
		require.NoError(t, err)
		forbidden := map[int]string{}
		for _, n := range g.Nodes() {
			v, ok := ourDots.Load(weak.Make(n))
			if !ok {
				continue
			}
			ax := v.(dotAxes)
			lhs, rhs := n.Inputs()[0].Shape().Dimensions, n.Inputs()[1].Shape().Dimensions
			size := 1
			for _, a := range ax.lhsBatch {
				size *= lhs[a]
			}
			for _, a := range ax.lhsContract {
				size *= lhs[a]
			}
			for _, a := range freeAxes(len(lhs), ax.lhsContract, ax.lhsBatch) {
				size *= lhs[a]
			}
			for _, a := range freeAxes(len(rhs), ax.rhsContract, ax.rhsBatch) {
				size *= rhs[a]
			}
			forbidden[size] = fmt.Sprintf("%v·%v", lhs, rhs)
		}
		require.NotEmpty(t, forbidden)
		for _, n := range g.Nodes() {
			for _, s := range []int{n.Shape().Size()} {
				if what, bad := forbidden[s]; bad && n.Shape().Rank() >= 3 {
					offenders = append(offenders, fmt.Sprintf("%s (the [batch,M,N,K] of %s)", n.Shape(), what))
				}
			}
		}
		return out, offenders
	}

	gemmVJPOff.Store(true)
	stock, stockOffenders := run()
	gemmVJPOff.Store(false)
	require.NotEmpty(t, stockOffenders, "the check must catch the stock rule's intermediates")
	gemm, offenders := run()
	require.Empty(t, offenders)
	for i := range gemm {
		require.InDeltaSlice(t, tensors.MustCopyFlatData[float32](stock[i]), tensors.MustCopyFlatData[float32](gemm[i]), 2e-3)
	}
	t.Logf("stock rule: %d [batch,M,N,K] nodes, e.g. %s; GEMM rule: none", len(stockOffenders), stockOffenders[0])
}
