package xla

import (
	"math"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/hindsight-ai/hindsight/credit"
)

// The distillation divergence of credit.distill modes topk and full, on the device,
// one chunk of positions at a time: the graph side of credit.DistillPosition, which is
// its float64 reference (xla/distill_test.go holds the two together). The teacher pass
// calls teacherTopK on each chunk's logits (TeacherView, ScoreHintedView); the
// training pass adds D_t·credit.Result.DistillWeight to each chunk's loss
// (distillNodes, newGradExec) and lets Gradient carry it into the weights.
//
// Memory: the largest tensors are the chunk's [n, vocab] logits and one [n, vocab]
// membership mask (mode topk) or the teacher's [n, vocab] log-probs (mode full); never a
// [T, vocab] tensor for a whole rollout. The teacher's top-k is [n, k].

// distillTailFloor is credit's floor on the teacher's tail log-prob (nats): a teacher
// whose top k rounded to all of the mass would otherwise make the reverse KL infinite.
const distillTailFloor = -30

// distillTopK returns D_t, the divergence between the teacher's top-k buckets (its k
// ids' log-probs and one tail bucket of every other id) and the student's same buckets,
// at every position of a chunk. Where k ≥ vocab the ids are the whole vocabulary and
// there is no tail bucket (ids must then be a permutation of the vocabulary).
//
//	logits: [n, vocab] student logits (float32 or float64)
//	ids:    [n, k] int32, the teacher's top-k ids of each position, distinct in a row
//	lp:     [n, k] the teacher's log-probs of ids (over the whole vocabulary), nats
//	tail:   [n] the teacher's tail log-prob: log of the mass of every other id
//	→ [n] D_t, logits' dtype
func distillTopK(cfg credit.DistillConfig, logits, ids, lp, tail *Node) *Node {
	g := logits.Graph()
	n, vocab := logits.Shape().Dimensions[0], logits.Shape().Dimensions[1]
	k := ids.Shape().Dimensions[1]
	dt := logits.DType()
	lse := rowLogSumExp(logits) // [n]
	// (row, id) pairs: Gather and Scatter index the [n, vocab] logits with them.
	rows := Iota(g, shapes.Make(dtypes.Int32, n, k), 0)
	at := Stack([]*Node{rows, ConvertDType(ids, dtypes.Int32)}, 2) // [n, k, 2]
	l := Sub(Gather(logits, at), ExpandAxes(lse, -1))              // [n, k] student log-probs of the ids
	a := ConvertDType(lp, dt)
	if k < vocab {
		// The student's tail: log Σ exp over the ids not in the row's top k, over lse.
		hits := StopGradient(Scatter(at, Ones(g, shapes.Make(dt, n, k)), shapes.Make(dt, n, vocab), false, true))
		rest := Where(GreaterThan(hits, ZerosLike(hits)), Infinity(g, dt, -1), logits)
		lt := Sub(rowLogSumExp(rest), lse)
		aTail := Max(ConvertDType(tail, dt), Scalar(g, dt, distillTailFloor))
		l = Concatenate([]*Node{l, ExpandAxes(lt, -1)}, 1)
		a = Concatenate([]*Node{a, ExpandAxes(aTail, -1)}, 1)
	}
	return bucketDivergence(cfg, l, a)
}

// distillFull returns D_t over the whole vocabulary.
//
//	logits:  [n, vocab] student logits
//	teacher: [n, vocab] the teacher's log-probs, nats
//	→ [n] D_t, logits' dtype
func distillFull(cfg credit.DistillConfig, logits, teacher *Node) *Node {
	l := Sub(logits, ExpandAxes(rowLogSumExp(logits), -1))
	return bucketDivergence(cfg, l, ConvertDType(teacher, logits.DType()))
}

// bucketDivergence returns Σ_b φ_b over the last axis, the point-wise terms of
// credit's divergences with student log-probs l and teacher log-probs a (held
// constant), clipped as cfg says:
//
//	reverse_kl: φ = q(l − a)     forward_kl: φ = p(a − l)
//	jsd:        φ = αp(a − m) + (1−α)q(l − m),  m = log(αp + (1−α)q)
//
//	l, a: [n, b] → [n]
func bucketDivergence(cfg credit.DistillConfig, l, a *Node) *Node {
	g := l.Graph()
	dt := l.DType()
	a = StopGradient(a)
	var phi *Node
	switch cfg.Divergence {
	case credit.DivForwardKL:
		phi = Mul(Exp(a), Sub(a, l))
	case credit.DivJSD:
		alpha := cfg.JSDAlpha
		x := AddScalar(a, math.Log(alpha))
		y := AddScalar(l, math.Log1p(-alpha))
		top := StopGradient(Max(x, y))
		m := Add(top, Log(Add(Exp(Sub(x, top)), Exp(Sub(y, top)))))
		phi = Add(MulScalar(Mul(Exp(a), Sub(a, m)), alpha), MulScalar(Mul(Exp(l), Sub(l, m)), 1-alpha))
	default: // reverse KL
		phi = Mul(Exp(l), Sub(l, a))
	}
	c := cfg.Clip
	if c > 0 && cfg.ClipScope == credit.ClipEntry {
		phi = Min(phi, Scalar(g, dt, c))
	}
	d := ReduceSum(phi, -1)
	if c > 0 && cfg.ClipScope == credit.ClipToken {
		d = Min(d, Scalar(g, dt, c))
	}
	return d
}

// teacherTopK returns the teacher's side of mode topk for a chunk: the k most likely
// ids of each row, their log-probs and the row's tail log-prob (the log of the mass of
// every other id; −Inf when k ≥ vocab, then k is vocab). GoMLX has no sort or top-k
// op, so it takes k rounds of ArgMax over the chunk's [n, vocab] logits, no gradient.
// Ids are ranked by logit, then by id (ties go to the lower id, as credit.NewTopK
// breaks them; the backend's ArgMax returns the first maximum). Round i looks only at
// the ids ranked after round i−1's pick, a mask computed afresh from the logits and
// that pick's (logit, id): no round depends on an earlier round's [n, vocab] tensor,
// so only one such temporary is live at a time. Masking cumulatively (each round
// masking the previous round's masked copy) let XLA CPU keep dozens of [n, vocab]
// copies live at once: 32 GB for one 1,024-row chunk of a 151,936-id vocabulary.
//
//	logits: [n, vocab] teacher logits → ids [n, k'] int32, lp [n, k'], tail [n]; k' = min(k, vocab)
func teacherTopK(logits *Node, k int) (ids, lp, tail *Node) {
	g := logits.Graph()
	logits = StopGradient(logits)
	n, vocab := logits.Shape().Dimensions[0], logits.Shape().Dimensions[1]
	dt := logits.DType()
	k = min(k, vocab)
	lse := ExpandAxes(rowLogSumExp(logits), -1) // [n, 1]
	rows := Iota(g, shapes.Make(dtypes.Int32, n), 0)
	col := Iota(g, shapes.Make(dtypes.Int32, n, vocab), 1)
	// after is the [n, vocab] mask of the ids ranked after (v, id) in each row.
	after := func(v, id *Node) *Node {
		v, id = ExpandAxes(v, -1), ExpandAxes(id, -1)
		return LogicalOr(LessThan(logits, v), LogicalAnd(Equal(logits, v), GreaterThan(col, id)))
	}
	negInf := BroadcastToDims(Infinity(g, dt, -1), n, vocab)
	idList, valList := make([]*Node, k), make([]*Node, k)
	for i := range k {
		cur := logits
		if i > 0 {
			cur = Where(after(valList[i-1], idList[i-1]), logits, negInf)
		}
		idList[i] = ConvertDType(ArgMax(cur, 1), dtypes.Int32)          // [n]
		valList[i] = Gather(logits, Stack([]*Node{rows, idList[i]}, 1)) // [n]
	}
	ids = Stack(idList, 1)           // [n, k]
	lp = Sub(Stack(valList, 1), lse) // [n, k]
	if k < vocab {
		rest := Where(after(valList[k-1], idList[k-1]), logits, negInf)
		tail = Sub(rowLogSumExp(rest), Squeeze(lse, -1))
	} else {
		tail = BroadcastToDims(Infinity(g, dt, -1), n) // no other id
	}
	return ids, lp, tail
}

// rowLogSumExp returns log Σ_v exp(x[i, v]), summed as vocabLogSumExp does (float64
// accumulation where the backend has it).
//
//	x: [n, vocab] → [n]
func rowLogSumExp(x *Node) *Node {
	return Squeeze(vocabLogSumExp(ExpandAxes(x, 0)), 0)
}
