package xla

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
)

// distillCase is one chunk: student logits and the teacher's full log-probs, n rows.
type distillCase struct {
	z, teacher [][]float64
}

func newDistillCase(rng *rand.Rand, n, V int) distillCase {
	var c distillCase
	for range n {
		z, t := make([]float64, V), make([]float64, V)
		for j := range V {
			z[j], t[j] = 2*rng.NormFloat64(), 2*rng.NormFloat64()
		}
		c.z, c.teacher = append(c.z, z), append(c.teacher, credit.LogSoftmax(t))
	}
	return c
}

// runDistill runs build on the case in dtype dt and returns D_t and ∂(Σ_t D_t)/∂logits.
func runDistill(t *testing.T, dt dtypes.DType, c distillCase, k int,
	build func(logits, ids, lp, tail, teacher *Node) *Node) ([]float64, [][]float64) {
	t.Helper()
	tks := make([]credit.TopK, len(c.z))
	for i := range tks {
		tks[i] = credit.NewTopK(c.teacher[i], k)
	}
	return runDistillRows(t, dt, c, tks, len(tks[0].IDs), build)
}

// runDistillRows is runDistill with the kept rows given, each padded to width K with
// empty slots (id −1).
func runDistillRows(t *testing.T, dt dtypes.DType, c distillCase, tks []credit.TopK, K int,
	build func(logits, ids, lp, tail, teacher *Node) *Node) ([]float64, [][]float64) {
	t.Helper()
	n, V := len(c.z), len(c.z[0])
	flatZ, flatT := make([]float64, 0, n*V), make([]float64, 0, n*V)
	ids, lp, tail := make([]int32, 0, n*K), make([]float64, 0, n*K), make([]float64, n)
	for i := range n {
		flatZ, flatT = append(flatZ, c.z[i]...), append(flatT, c.teacher[i]...)
		for b, id := range tks[i].IDs {
			ids, lp = append(ids, int32(id)), append(lp, tks[i].LogProbs[b])
		}
		for range K - len(tks[i].IDs) {
			ids, lp = append(ids, -1), append(lp, 0)
		}
		tail[i] = tks[i].Tail
		if math.IsInf(tail[i], -1) {
			tail[i] = 0 // no tail bucket: unused
		}
	}
	toDT := func(x []float64, dims ...int) *tensors.Tensor {
		if dt == dtypes.Float32 {
			f := make([]float32, len(x))
			for i, v := range x {
				f[i] = float32(v)
			}
			return tensors.FromFlatDataAndDimensions(f, dims...)
		}
		return tensors.FromFlatDataAndDimensions(x, dims...)
	}
	e, err := NewExec(newTestBackend(t), func(in []*Node) []*Node {
		d := build(in[0], in[1], in[2], in[3], in[4])
		return []*Node{d, Gradient(ReduceAllSum(d), in[0])[0]}
	})
	require.NoError(t, err)
	out, err := e.Exec(toDT(flatZ, n, V), tensors.FromFlatDataAndDimensions(ids, n, K), toDT(lp, n, K), toDT(tail, n), toDT(flatT, n, V))
	require.NoError(t, err)
	read := func(x *tensors.Tensor) []float64 {
		if dt == dtypes.Float32 {
			f := tensors.MustCopyFlatData[float32](x)
			r := make([]float64, len(f))
			for i, v := range f {
				r[i] = float64(v)
			}
			return r
		}
		return tensors.MustCopyFlatData[float64](x)
	}
	d, g := read(out[0]), read(out[1])
	grad := make([][]float64, n)
	for i := range n {
		grad[i] = g[i*V : (i+1)*V]
	}
	return d, grad
}

// TestDistillGraphMatchesReference: the device divergence of modes topk and full and
// its gradient in the student's logits equal credit's float64 reference, for every
// divergence, clip and k (1, inside the vocabulary, the whole vocabulary, past it), in
// float64 to 1e-9 and in float32 to float32 rounding.
func TestDistillGraphMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const n, V = 3, 7
	c := newDistillCase(rng, n, V)
	for _, div := range []credit.Divergence{credit.DivReverseKL, credit.DivForwardKL, credit.DivJSD} {
		for _, clip := range []struct {
			c     float64
			scope credit.ClipScope
		}{{0, credit.ClipEntry}, {0.05, credit.ClipEntry}, {0.3, credit.ClipToken}} {
			cfg := credit.DefaultDistillConfig()
			cfg.Mode, cfg.Divergence, cfg.Clip, cfg.ClipScope = credit.DistillTopK, div, clip.c, clip.scope
			if div == credit.DivJSD {
				cfg.JSDAlpha = 0.3
			}
			for _, k := range []int{1, 3, V, V + 2} {
				for _, dt := range []dtypes.DType{dtypes.Float64, dtypes.Float32} {
					name := fmt.Sprintf("%s clip %v/%s k=%d %s", div, clip.c, clip.scope, k, dt)
					tol := 1e-9
					if dt == dtypes.Float32 {
						tol = 2e-5
					}
					d, g := runDistill(t, dt, c, k, func(logits, ids, lp, tail, _ *Node) *Node {
						return distillTopK(cfg, logits, ids, lp, tail)
					})
					for i := range n {
						wd, wg := credit.DistillPosition(cfg, c.z[i], credit.NewTopK(c.teacher[i], k))
						require.InDelta(t, wd, d[i], tol, "%s: D[%d]", name, i)
						for j := range V {
							require.InDelta(t, wg[j], g[i][j], tol, "%s: ∂D[%d]/∂z[%d]", name, i, j)
						}
					}
				}
			}
			name := fmt.Sprintf("full %s clip %v/%s", div, clip.c, clip.scope)
			d, g := runDistill(t, dtypes.Float64, c, V, func(logits, _, _, _, teacher *Node) *Node {
				return distillFull(cfg, logits, teacher)
			})
			for i := range n {
				wd, wg := credit.DistillPosition(cfg, c.z[i], credit.NewTopK(c.teacher[i], V))
				require.InDelta(t, wd, d[i], 1e-9, "%s: D[%d]", name, i)
				for j := range V {
					require.InDelta(t, wg[j], g[i][j], 1e-9, "%s: ∂D[%d]/∂z[%d]", name, i, j)
				}
			}
		}
	}
}

// TestDistillGraphIDsAndTails: with the student's, the teacher's or the union's ids
// (union rows padded with empty slots) and either tail, the device divergence and its
// gradient equal credit's reference, including a confident teacher (logits 40·g) and
// a student whose top id holds all but e^-40 of its mass (a capped clamped tail).
func TestDistillGraphIDsAndTails(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const n, V = 4, 11
	c := newDistillCase(rng, n, V)
	for j := range V { // row 2: a confident teacher; row 3: a confident student
		c.teacher[2][j] *= 20
		c.z[3][j] = 0
	}
	c.teacher[2] = credit.LogSoftmax(c.teacher[2])
	c.z[3][4] = 40
	for _, tail := range []credit.TailMode{credit.TailClamped, credit.TailExact} {
		for _, ids := range []credit.TopKIDs{credit.IDsStudent, credit.IDsTeacher, credit.IDsUnion} {
			for _, div := range []credit.Divergence{credit.DivReverseKL, credit.DivForwardKL, credit.DivJSD} {
				cfg := credit.DefaultDistillConfig()
				cfg.Mode, cfg.Divergence, cfg.Tail, cfg.TopKIDs = credit.DistillTopK, div, tail, ids
				ks, dts := []int{1, 3, 6}, []dtypes.DType{dtypes.Float64, dtypes.Float32}
				if testing.Short() { // CI's XLA CPU pass: one program per combination
					ks, dts = []int{6}, []dtypes.DType{dtypes.Float32}
				}
				for _, k := range ks {
					tks := make([]credit.TopK, n)
					K := 0
					for i := range n {
						tks[i] = credit.SelectTopK(ids, c.z[i], c.teacher[i], k)
						K = max(K, len(tks[i].IDs))
					}
					if ids == credit.IDsUnion {
						K = 2 * k
					}
					for _, dt := range dts {
						name := fmt.Sprintf("%s %s %s k=%d %s", tail, ids, div, k, dt)
						tol := 1e-9
						if dt == dtypes.Float32 {
							tol = 5e-5
						}
						d, g := runDistillRows(t, dt, c, tks, K, func(logits, ids, lp, tail, _ *Node) *Node {
							return distillTopK(cfg, logits, ids, lp, tail)
						})
						for i := range n {
							wd, wg := credit.DistillPosition(cfg, c.z[i], tks[i])
							require.InDelta(t, wd, d[i], tol*max(1, math.Abs(wd)), "%s: D[%d]", name, i)
							for j := range V {
								require.InDelta(t, wg[j], g[i][j], tol, "%s: ∂D[%d]/∂z[%d]", name, i, j)
							}
						}
					}
				}
			}
		}
	}
}

// TestDistillGraphNegInf: a teacher that rules ids out (log-prob −Inf) gives the
// reference's finite value and gradient on the device, never NaN, for forward KL and
// JSD in mode full (reverse KL there is a true +Inf wherever the student has mass).
func TestDistillGraphNegInf(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	const n, V = 2, 6
	c := newDistillCase(rng, n, V)
	for i := range n {
		raw := make([]float64, V)
		for j := range V {
			raw[j] = 2 * rng.NormFloat64()
		}
		raw[1], raw[4] = math.Inf(-1), math.Inf(-1)
		c.teacher[i] = credit.LogSoftmax(raw)
	}
	for _, div := range []credit.Divergence{credit.DivForwardKL, credit.DivJSD} {
		cfg := credit.DefaultDistillConfig()
		cfg.Mode, cfg.Divergence = credit.DistillFull, div
		for _, dt := range []dtypes.DType{dtypes.Float64, dtypes.Float32} {
			tol := 1e-9
			if dt == dtypes.Float32 {
				tol = 2e-5
			}
			d, g := runDistill(t, dt, c, V, func(logits, _, _, _, teacher *Node) *Node {
				return distillFull(cfg, logits, teacher)
			})
			for i := range n {
				wd, wg := credit.DistillPosition(cfg, c.z[i], credit.NewTopK(c.teacher[i], V))
				require.False(t, math.IsNaN(d[i]), "%s %s: D[%d] is NaN", div, dt, i)
				require.InDelta(t, wd, d[i], tol, "%s %s: D[%d]", div, dt, i)
				for j := range V {
					require.False(t, math.IsNaN(g[i][j]), "%s %s: gradient NaN", div, dt)
					require.InDelta(t, wg[j], g[i][j], tol, "%s %s: ∂D[%d]/∂z[%d]", div, dt, i, j)
				}
			}
		}
	}
}

// TestTeacherAt: the device's teacher side at the student's ids (and, for union, its
// own top k with the student's duplicates left empty) is credit.SelectTopK's.
func TestTeacherAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	const n, V = 4, 9
	c := newDistillCase(rng, n, V)
	c.teacher[1] = credit.LogSoftmax(c.z[1]) // the same ranking: union adds nothing
	for _, union := range []bool{false, true} {
		for _, k := range []int{1, 3, 5} {
			which := credit.IDsStudent
			if union {
				which = credit.IDsUnion
			}
			var flatT []float64
			sids := make([]int32, 0, n*k)
			for i := range n {
				flatT = append(flatT, c.teacher[i]...)
				for _, id := range credit.SelectTopK(credit.IDsStudent, c.z[i], c.teacher[i], k).IDs {
					sids = append(sids, int32(id))
				}
			}
			e, err := NewExec(newTestBackend(t), func(lg, s *Node) []*Node {
				ids, lp, tail := teacherAt(AddScalar(lg, 2), s, union, k)
				return []*Node{ids, lp, tail}
			})
			require.NoError(t, err)
			out, err := e.Exec(tensors.FromFlatDataAndDimensions(flatT, n, V), tensors.FromFlatDataAndDimensions(sids, n, k))
			require.NoError(t, err)
			ids := tensors.MustCopyFlatData[int32](out[0])
			lp, tail := tensors.MustCopyFlatData[float64](out[1]), tensors.MustCopyFlatData[float64](out[2])
			W := len(ids) / n
			for i := range n {
				want := credit.SelectTopK(which, c.z[i], c.teacher[i], k)
				var got []int
				for b := range W {
					if id := ids[i*W+b]; id >= 0 {
						got = append(got, int(id))
						require.InDelta(t, c.teacher[i][id], lp[i*W+b], 1e-12)
					} else {
						require.True(t, math.IsInf(lp[i*W+b], -1), "an empty slot has no mass")
					}
				}
				require.Equal(t, want.IDs, got, "%s k=%d row %d", which, k, i)
				require.InDelta(t, want.Tail, tail[i], 1e-12, "%s k=%d row %d: exact tail", which, k, i)
			}
		}
	}
}

// TestTeacherTopK: the device's top k of teacher logits are credit.NewTopK's ids,
// log-probs and tail; fed to distillTopK they give the reference divergence.
func TestTeacherTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	const n, V = 4, 9
	c := newDistillCase(rng, n, V) // c.teacher rows are log-probs: logits up to a constant
	cfg := credit.DefaultDistillConfig()
	cfg.Mode = credit.DistillTopK
	for _, k := range []int{1, 4, V, V + 3} {
		K := min(k, V)
		e, err := NewExec(newTestBackend(t), func(in []*Node) []*Node {
			ids, lp, tail := teacherTopK(AddScalar(in[1], 3), k) // shifted: logits, not log-probs
			return []*Node{ids, lp, tail, distillTopK(cfg, in[0], ids, lp, tail)}
		})
		require.NoError(t, err)
		var flatZ, flatT []float64
		for i := range n {
			flatZ, flatT = append(flatZ, c.z[i]...), append(flatT, c.teacher[i]...)
		}
		out, err := e.Exec(tensors.FromFlatDataAndDimensions(flatZ, n, V), tensors.FromFlatDataAndDimensions(flatT, n, V))
		require.NoError(t, err)
		ids := tensors.MustCopyFlatData[int32](out[0])
		lp, tail, d := tensors.MustCopyFlatData[float64](out[1]), tensors.MustCopyFlatData[float64](out[2]), tensors.MustCopyFlatData[float64](out[3])
		require.Len(t, ids, n*K)
		for i := range n {
			want := credit.NewTopK(c.teacher[i], k)
			for b := range K {
				require.EqualValues(t, want.IDs[b], ids[i*K+b], "k=%d row %d bucket %d", k, i, b)
				require.InDelta(t, want.LogProbs[b], lp[i*K+b], 1e-12)
			}
			if math.IsInf(want.Tail, -1) {
				require.True(t, math.IsInf(tail[i], -1), "k=%d: no tail", k)
			} else {
				require.InDelta(t, want.Tail, tail[i], 1e-12)
			}
			wd, _ := credit.DistillPosition(cfg, c.z[i], want)
			require.InDelta(t, wd, d[i], 1e-9, "k=%d row %d: D", k, i)
		}
	}
}

// TestTeacherTopKTies checks teacherTopK's ranking where logits repeat: equal logits
// go to the lower id first, as credit.NewTopK ranks them, every id at most once, and
// the tail is the mass of exactly the ids not picked.
func TestTeacherTopKTies(t *testing.T) {
	rows := [][]float64{
		{1, 3, 3, 0, 3, -1, 0, 2, 2},
		{0, 0, 0, 0, 0, 0, 0, 0, 0},
		{5, -2, 5, -2, 5, -2, 1, 1, -7},
	}
	const V = 9
	var flat []float64
	logProbs := make([][]float64, len(rows))
	for i, r := range rows {
		flat = append(flat, r...)
		lse := 0.0
		for _, x := range r {
			lse += math.Exp(x)
		}
		lse = math.Log(lse)
		for _, x := range r {
			logProbs[i] = append(logProbs[i], x-lse)
		}
	}
	for _, k := range []int{1, 2, 3, 5, 8, V} {
		e, err := NewExec(newTestBackend(t), func(x *Node) []*Node {
			ids, lp, tail := teacherTopK(x, k)
			return []*Node{ids, lp, tail}
		})
		require.NoError(t, err)
		out, err := e.Exec(tensors.FromFlatDataAndDimensions(flat, len(rows), V))
		require.NoError(t, err)
		ids := tensors.MustCopyFlatData[int32](out[0])
		lp, tail := tensors.MustCopyFlatData[float64](out[1]), tensors.MustCopyFlatData[float64](out[2])
		for i := range rows {
			want := credit.NewTopK(logProbs[i], k)
			seen := map[int32]bool{}
			for b := range k {
				id := ids[i*k+b]
				require.False(t, seen[id], "k=%d row %d: id %d twice", k, i, id)
				seen[id] = true
				require.EqualValues(t, want.IDs[b], id, "k=%d row %d bucket %d", k, i, b)
				require.InDelta(t, want.LogProbs[b], lp[i*k+b], 1e-12)
			}
			if math.IsInf(want.Tail, -1) {
				require.True(t, math.IsInf(tail[i], -1), "k=%d row %d: no tail", k, i)
			} else {
				require.InDelta(t, want.Tail, tail[i], 1e-12, "k=%d row %d: tail", k, i)
			}
		}
	}
}
