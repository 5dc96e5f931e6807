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

// distillTailFloor is credit's floor on the teacher's exact tail log-prob (nats, tail
// exact): a teacher whose top k rounded to all of the mass would otherwise make the
// reverse KL infinite.
const distillTailFloor = -30

// distillTopK returns D_t, the divergence between the teacher's top-k buckets (its
// log-probs at the kept ids and one tail bucket of every other id) and the student's
// same buckets, at every position of a chunk. Where the ids cover the vocabulary there
// is no tail bucket (ids must then be a permutation of the vocabulary). An id of −1 is
// an empty slot (union's teacher ids that the student's already hold): no bucket.
// cfg.Tail says how both tails are computed: clamped (the peers' log(1 − Σp), floor
// credit.ClampedTailFloor) or exact (logsumexp of the other ids; the teacher's is tail,
// raised to −30).
//
//	logits: [n, vocab] student logits (float32 or float64)
//	ids:    [n, k] int32, the kept ids of each position, distinct in a row, or −1
//	lp:     [n, k] the teacher's log-probs of ids (over the whole vocabulary), nats
//	tail:   [n] the teacher's exact tail log-prob: log of the mass of every other id
//	→ [n] D_t, logits' dtype
func distillTopK(cfg credit.DistillConfig, logits, ids, lp, tail *Node) *Node {
	g := logits.Graph()
	n, vocab := logits.Shape().Dimensions[0], logits.Shape().Dimensions[1]
	k := ids.Shape().Dimensions[1]
	dt := logits.DType()
	lse := rowLogSumExp(logits) // [n]
	ids = ConvertDType(ids, dtypes.Int32)
	valid := GreaterOrEqual(ids, ZerosLike(ids))
	negInf := BroadcastToDims(Infinity(g, dt, -1), n, k)
	// (row, id) pairs: Gather and Scatter index the [n, vocab] logits with them.
	rows := Iota(g, shapes.Make(dtypes.Int32, n, k), 0)
	at := Stack([]*Node{rows, Where(valid, ids, ZerosLike(ids))}, 2)        // [n, k, 2]
	l := Where(valid, Sub(Gather(logits, at), ExpandAxes(lse, -1)), negInf) // [n, k] student log-probs of the ids
	a := Where(valid, ConvertDType(lp, dt), negInf)
	// A row whose ids hold every id (k ≥ vocab, or a union as wide as the
	// vocabulary) has no tail bucket: both sides' tails are −Inf there, a bucket of no
	// mass.
	hasRest := LessThan(ReduceSum(ConvertDType(valid, dt), -1), Scalar(g, dt, float64(vocab))) // [n]
	var lt, aTail *Node
	if cfg.Tail == credit.TailExact {
		// The student's tail: log Σ exp over the ids not kept, over lse.
		hits := StopGradient(Scatter(at, ConvertDType(valid, dt), shapes.Make(dt, n, vocab), false, false))
		out := LogicalAnd(GreaterThan(hits, ZerosLike(hits)), ExpandAxes(hasRest, -1))
		rest := Where(out, Infinity(g, dt, -1), logits)
		lt = Sub(rowLogSumExp(rest), lse)
		aTail = Max(ConvertDType(tail, dt), Scalar(g, dt, distillTailFloor))
	} else {
		lt = clampedTail(l)
		aTail = StopGradient(clampedTail(a))
	}
	noTail := BroadcastToDims(Infinity(g, dt, -1), n)
	lt, aTail = Where(hasRest, lt, noTail), Where(hasRest, aTail, noTail)
	l = Concatenate([]*Node{l, ExpandAxes(lt, -1)}, 1)
	a = Concatenate([]*Node{a, ExpandAxes(aTail, -1)}, 1)
	return bucketDivergence(cfg, l, a)
}

// clampedTail is credit.TailLogProb on the device: log(1 − Σ_b exp(x_b)) per row, with
// log Σ capped at −1e-7 (the peers' clamp; then credit.ClampedTailFloor and no
// gradient). GoMLX has no gradient for Expm1, so the value is log(−expm1(s)) and the
// gradient is added as (s − sg(s))·d with d = ∂/∂s log(1 − e^s) = −1/expm1(−s).
//
//	x: [n, k] log-probs (−Inf for empty slots) → [n]
func clampedTail(x *Node) *Node {
	g := x.Graph()
	dt := x.DType()
	s := rowLogSumExp(x)
	capped := GreaterOrEqual(s, Scalar(g, dt, -1e-7))
	safe := StopGradient(Where(capped, Scalar(g, dt, -1), s)) // any s below the cap
	v := StopGradient(Log(Neg(Expm1(safe))))
	d := StopGradient(Neg(Inverse(Expm1(Neg(safe)))))
	grad := Mul(Sub(s, StopGradient(s)), d)
	return Where(capped, Scalar(g, dt, credit.ClampedTailFloor), Add(v, grad))
}

// distillFull returns D_t over the whole vocabulary.
//
//	logits:  [n, vocab] student logits
//	teacher: [n, vocab] the teacher's log-probs, nats (−Inf allowed)
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
// with 0·log 0 = 0 as credit's reference has it: a term whose weight p (or q) is 0
// is 0 with no gradient, whatever the other side is, so −Inf log-probs (a teacher that
// rules an id out, an empty slot) give no NaN in the value or the gradient. Operands
// under a zero weight are replaced by 0 before any arithmetic, so no Inf·0 reaches the
// backward pass either.
//
//	l, a: [n, b] → [n]
func bucketDivergence(cfg credit.DistillConfig, l, a *Node) *Node {
	g := l.Graph()
	dt := l.DType()
	a = StopGradient(a)
	zero := ZerosLike(l)
	pIn := GreaterThan(a, Infinity(g, dt, -1)) // p > 0
	qIn := GreaterThan(l, Infinity(g, dt, -1)) // q > 0
	aS, lS := Where(pIn, a, zero), Where(qIn, l, zero)
	p := Where(pIn, Exp(aS), zero)
	q := Where(qIn, Exp(lS), zero)
	var phi *Node
	switch cfg.Divergence {
	case credit.DivForwardKL:
		// p > 0 and l = −Inf is a true +Inf, as the reference has it.
		phi = Where(pIn, Mul(p, Sub(aS, Where(pIn, l, zero))), zero)
	case credit.DivJSD:
		alpha := cfg.JSDAlpha
		both := LogicalOr(pIn, qIn)
		x := Where(pIn, AddScalar(aS, math.Log(alpha)), Infinity(g, dt, -1))
		y := Where(qIn, AddScalar(lS, math.Log1p(-alpha)), Infinity(g, dt, -1))
		top := StopGradient(Where(both, Max(x, y), zero))
		sum := Add(Exp(Sub(x, top)), Exp(Sub(y, top)))
		m := Add(top, Log(Where(both, sum, OnesLike(sum))))
		phi = Add(MulScalar(Where(pIn, Mul(p, Sub(aS, m)), zero), alpha),
			MulScalar(Where(qIn, Mul(q, Sub(lS, m)), zero), 1-alpha))
	default: // reverse KL; q > 0 and a = −Inf is a true +Inf
		phi = Where(qIn, Mul(q, Sub(lS, Where(qIn, a, zero))), zero)
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

// teacherAt returns the teacher's side of mode topk at the student's ids sids [n, k]
// (topk_ids student), or, with union, at the student's ids followed by the teacher's
// own top k (teacherTopK of k) where those the student's already hold are −1 (empty).
// The tail is exact: the log of the teacher's mass of every id not kept.
//
//	logits: [n, vocab] teacher logits, sids: [n, k] int32
//	→ ids [n, k or 2k] int32, lp [n, k or 2k] (−Inf at −1), tail [n]
func teacherAt(logits, sids *Node, union bool, k int) (ids, lp, tail *Node) {
	g := logits.Graph()
	logits = StopGradient(logits)
	n, vocab := logits.Shape().Dimensions[0], logits.Shape().Dimensions[1]
	dt := logits.DType()
	lse := rowLogSumExp(logits) // [n]
	sids = ConvertDType(sids, dtypes.Int32)
	gather := func(ids *Node) *Node { // [n, w] ids (no −1) → teacher log-probs
		w := ids.Shape().Dimensions[1]
		rows := Iota(g, shapes.Make(dtypes.Int32, n, w), 0)
		return Sub(Gather(logits, Stack([]*Node{rows, ids}, 2)), ExpandAxes(lse, -1))
	}
	ids, lp = sids, gather(sids)
	all := sids // every kept id, duplicates allowed, for the tail's mask
	if union {
		tids, tlp, _ := teacherTopK(logits, k)
		// dup[i, j]: the teacher's j-th id is one of row i's student ids.
		dup := ReduceMax(ConvertDType(Equal(ExpandAxes(tids, -1), ExpandAxes(sids, 1)), dt), -1) // [n, k]
		isDup := GreaterThan(dup, ZerosLike(dup))
		ids = Concatenate([]*Node{sids, Where(isDup, Neg(OnesLike(tids)), tids)}, 1)
		lp = Concatenate([]*Node{lp, Where(isDup, BroadcastToDims(Infinity(g, dt, -1), n, k), tlp)}, 1)
		all = Concatenate([]*Node{sids, tids}, 1)
	}
	w := all.Shape().Dimensions[1]
	rows := Iota(g, shapes.Make(dtypes.Int32, n, w), 0)
	hits := Scatter(Stack([]*Node{rows, all}, 2), Ones(g, shapes.Make(dt, n, w)), shapes.Make(dt, n, vocab), false, false)
	kept := GreaterThan(hits, ZerosLike(hits))
	// A row whose kept ids are the whole vocabulary has no tail (−Inf); its masked
	// copy keeps the logits so the logsumexp stays finite, and the value is dropped.
	full := GreaterOrEqual(ReduceSum(ConvertDType(kept, dt), -1), Scalar(g, dt, float64(vocab)))
	rest := Where(LogicalAnd(kept, LogicalNot(ExpandAxes(full, -1))), Infinity(g, dt, -1), logits)
	tail = Where(full, BroadcastToDims(Infinity(g, dt, -1), n), Sub(rowLogSumExp(rest), lse))
	return ids, lp, tail
}

// rowLogSumExp returns log Σ_v exp(x[i, v]), summed as vocabLogSumExp does (float64
// accumulation where the backend has it).
//
//	x: [n, vocab] → [n]
func rowLogSumExp(x *Node) *Node {
	return Squeeze(vocabLogSumExp(ExpandAxes(x, 0)), 0)
}
