package xla

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"weak"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// GoMLX v0.26.0 differentiates DotGeneral by inserting the contracted axes into the
// adjoint, multiplying by the broadcast other operand and reduce-summing: for a
// projection [batch, M, K]·[N, K] that is a [batch, M, N, K] intermediate, slow on
// CPU and invisible to the matrix units of a GPU. The dot products this package
// builds (dot) are recorded here and get the textbook GEMM rule instead:
//
//	C = A·B  ⇒  dA = dC·Bᵀ, dB = Aᵀ·dC   (each one DotGeneral plus a transpose)
//
// Every other DotGeneral node keeps the stock rule: the registration wraps it.

// dotAxes is how a recorded DotGeneral contracts its operands.
type dotAxes struct {
	lhsContract, lhsBatch, rhsContract, rhsBatch []int
}

var (
	// ourDots holds the DotGeneral nodes made by dot, keyed by a weak pointer so a
	// finished graph's nodes can be collected; a cleanup drops the entry.
	ourDots sync.Map // weak.Pointer[Node] → dotAxes
	// gemmVJPOff switches the GEMM rule off (tests compare against the stock rule).
	gemmVJPOff         atomic.Bool
	stockDotGeneralVJP VJP
	registerOnce       sync.Once
)

func registerGEMMVJP() {
	registerOnce.Do(func() {
		stockDotGeneralVJP = VJPRegistration[NodeTypeDotGeneral]
		VJPRegistration[NodeTypeDotGeneral] = func(node *Node, v []*Node, out shapes.Shape) []*Node {
			if !gemmVJPOff.Load() {
				if axes, ok := ourDots.Load(weak.Make(node)); ok {
					return gemmVJP(node, v[0], axes.(dotAxes))
				}
			}
			return stockDotGeneralVJP(node, v, out)
		}
	})
}

func init() { registerGEMMVJP() }

// dot is DotGeneral for the model's matrix products, differentiated by gemmVJP.
// The output axes are [batch axes…, lhs free axes…, rhs free axes…], as DotGeneral.
func dot(lhs *Node, lhsContract, lhsBatch []int, rhs *Node, rhsContract, rhsBatch []int) *Node {
	out := DotGeneral(lhs, lhsContract, lhsBatch, rhs, rhsContract, rhsBatch)
	key := weak.Make(out)
	ourDots.Store(key, dotAxes{slices.Clone(lhsContract), slices.Clone(lhsBatch), slices.Clone(rhsContract), slices.Clone(rhsBatch)})
	runtime.AddCleanup(out, func(k weak.Pointer[Node]) { ourDots.Delete(k) }, key)
	return out
}

// freeAxes lists the axes of a rank-r operand that are neither batch nor
// contracting, in increasing order: the order DotGeneral emits them in.
func freeAxes(rank int, contract, batch []int) []int {
	var free []int
	for a := range rank {
		if !slices.Contains(contract, a) && !slices.Contains(batch, a) {
			free = append(free, a)
		}
	}
	return free
}

// gemmVJP returns the adjoints of a recorded DotGeneral's two operands given the
// adjoint v of its output, each as one DotGeneral of v with the other operand,
// transposed back to the operand's axis order.
func gemmVJP(node, v *Node, ax dotAxes) []*Node {
	lhs, rhs := node.Inputs()[0], node.Inputs()[1]
	nb := len(ax.lhsBatch)
	lhsFree := freeAxes(lhs.Rank(), ax.lhsContract, ax.lhsBatch)
	rhsFree := freeAxes(rhs.Rank(), ax.rhsContract, ax.rhsBatch)
	vBatch := make([]int, nb)
	for i := range nb {
		vBatch[i] = i
	}
	vLhsFree := make([]int, len(lhsFree)) // where lhs's free axes sit in v
	for i := range lhsFree {
		vLhsFree[i] = nb + i
	}
	vRhsFree := make([]int, len(rhsFree))
	for i := range rhsFree {
		vRhsFree[i] = nb + len(lhsFree) + i
	}
	return []*Node{
		adjoint(v, vRhsFree, vBatch, rhs, rhsFree, ax.rhsBatch, lhs.Rank(), ax.lhsBatch, lhsFree, ax.lhsContract, ax.rhsContract),
		adjoint(v, vLhsFree, vBatch, lhs, lhsFree, ax.lhsBatch, rhs.Rank(), ax.rhsBatch, rhsFree, ax.rhsContract, ax.lhsContract),
	}
}

// adjoint computes the adjoint of operand "this" of C = this·other: contract v's
// axes holding other's free axes with other's free axes, batch over the batch
// axes. DotGeneral then yields [batch…, this free…, other contracting axes in
// increasing order…]; thisContract[i] pairs with otherContract[i], so the result
// is transposed to this operand's layout.
func adjoint(v *Node, vContract, vBatch []int, other *Node, otherFree, otherBatch []int,
	thisRank int, thisBatch, thisFree, thisContract, otherContract []int) *Node {
	r := DotGeneral(v, vContract, vBatch, other, otherFree, otherBatch)
	sortedOther := slices.Sorted(slices.Values(otherContract))
	perm := make([]int, thisRank) // perm[a] = axis of r holding this operand's axis a
	for i, a := range thisBatch {
		perm[a] = i
	}
	for i, a := range thisFree {
		perm[a] = len(thisBatch) + i
	}
	for i, a := range thisContract {
		perm[a] = len(thisBatch) + len(thisFree) + slices.Index(sortedOther, otherContract[i])
	}
	for i, p := range perm {
		if i != p {
			return TransposeAllAxes(r, perm...)
		}
	}
	return r
}
