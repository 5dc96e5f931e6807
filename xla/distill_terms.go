package xla

import (
	"fmt"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
)

// The distillation term of modes topk and full in the training pass: per chunk,
// Σ_i dw_i·D_i with dw = credit.Result.DistillWeight and D the divergence of the
// student's distribution at the position from the teacher's (TeacherDist, kept by
// the teacher pass). The teacher's rows enter the chunk's executable as inputs, so
// no gradient reaches them; the student's logits are the chunk's own.

// distillTerms are one rollout's distillation inputs, by token position t (the
// prediction of y_t): the weight and where the teacher's row of t is.
type distillTerms struct {
	view   TeacherView
	vocab  int
	Weight []float32 // DistillWeight_t
	dists  []TeacherDist
	// span[t] and row[t] locate t's teacher row (span −1: none). Where spans
	// overlap, the first span covering t is t's teacher.
	span, row []int
}

// newDistillTerms returns the distillation inputs of a rollout of T tokens with
// weights dw (credit.Result.DistillWeight) and hint spans hs whose teacher rows are
// dists (ScoreHintedView's, aligned with hs). It fails when a weighted position has
// no teacher row.
func newDistillTerms(view TeacherView, vocab int, dw []float64, hs []credit.Hint, dists []TeacherDist) (*distillTerms, error) {
	T := len(dw)
	d := &distillTerms{view: view, vocab: vocab, Weight: make([]float32, T), dists: dists, span: make([]int, T), row: make([]int, T)}
	for t := range d.span {
		d.span[t] = -1
	}
	if len(dists) != len(hs) {
		return nil, fmt.Errorf("distill terms: %d teacher distributions for %d hint spans", len(dists), len(hs))
	}
	for k, h := range hs {
		if dists[k].Rows() != h.End-h.InsertAt {
			return nil, fmt.Errorf("distill terms: span %d [%d, %d) has %d teacher rows", k, h.InsertAt, h.End, dists[k].Rows())
		}
		for t := h.InsertAt; t < h.End; t++ {
			if d.span[t] < 0 {
				d.span[t], d.row[t] = k, t-h.InsertAt
			}
		}
	}
	for t, w := range dw {
		if w == 0 {
			continue
		}
		if d.span[t] < 0 {
			return nil, fmt.Errorf("distill terms: position %d has distill weight %g and no teacher", t, w)
		}
		d.Weight[t] = float32(w)
	}
	return d, nil
}

// width is K, the teacher row's width (TeacherView.width).
func (d *distillTerms) width() int { return d.view.width(d.vocab) }

// at returns the distillation inputs of chunk positions off…off+n−1 (which predict
// y_{off+1}…y_{off+n}), in takeDistill's order: dw [1, n], then for topk ids [n, K]
// int32, log-probs [n, K] and tail [n], for full log-probs [n, vocab]. A position
// without a teacher (or past the rollout) gets weight 0 and padRow's stand-in.
func (d *distillTerms) at(off, n int) []any {
	K := d.width()
	w, lp := make([]float32, n), make([]float32, n*K)
	var ids []int32
	var tail []float32
	if d.view.Mode == credit.DistillTopK {
		ids, tail = make([]int32, n*K), make([]float32, n)
	}
	for i := range n {
		t := off + i + 1
		if t >= len(d.Weight) || d.span[t] < 0 {
			padRow(d.vocab, K, ids, lp, tail, i)
			continue
		}
		w[i] = d.Weight[t]
		src, r := d.dists[d.span[t]], d.row[t]
		copy(lp[i*K:(i+1)*K], src.LogProbs[r*K:(r+1)*K])
		if ids != nil {
			copy(ids[i*K:(i+1)*K], src.IDs[r*K:(r+1)*K])
			tail[i] = src.Tail[r]
		}
	}
	out := []any{tensors.FromFlatDataAndDimensions(w, 1, n)}
	if ids != nil {
		return append(out, tensors.FromFlatDataAndDimensions(ids, n, K),
			tensors.FromFlatDataAndDimensions(lp, n, K), tensors.FromFlatDataAndDimensions(tail, n))
	}
	return append(out, tensors.FromFlatDataAndDimensions(lp, n, K))
}

// split returns the rollout's terms cut in two, whose gradients add up to that of
// ct: the outcome part (credit.Result.WeightOut, and the KL penalty) and the
// distillation part (the sampled-token hint weight Weight − WeightOut, and the
// divergence term). Trainer.Step accumulates them apart when asked for each term's
// gradient norm (TrainerOptions.TermGradNorms).
func (ct chunkTerms) split(res *credit.Result) (out, distill chunkTerms) {
	T := len(ct.Weight)
	out = chunkTerms{Weight: make([]float32, T), KLCoef: ct.KLCoef, Ref: ct.Ref, Temp: ct.Temp}
	distill = chunkTerms{Weight: make([]float32, T), Distill: ct.Distill, Temp: ct.Temp}
	for t, w := range res.Weight {
		wo := res.WeightOut[t]
		out.Weight[t] = float32(wo)
		distill.Weight[t] = float32(w - wo)
	}
	return out, distill
}

// empty reports whether ct contributes nothing: every weight 0, no KL, no
// divergence term.
func (ct chunkTerms) empty() bool {
	return ct.KLCoef == nil && ct.Distill == nil && !slices.ContainsFunc(ct.Weight, func(w float32) bool { return w != 0 })
}

// distillNodes are the distillation inputs of a chunk's training graph.
type distillNodes struct {
	view   TeacherView
	weight *Node // [1, n] dw
	// ids, lp, tail: the teacher's top k (topk); lp alone is the full
	// log-distribution (full).
	ids, lp, tail *Node
}

// takeDistill reads distillTerms.at's inputs from l.
func takeDistill(l *list[*Node], v TeacherView) distillNodes {
	dn := distillNodes{view: v, weight: l.next()}
	if v.Mode == credit.DistillTopK {
		dn.ids, dn.lp, dn.tail = l.next(), l.next(), l.next()
	} else {
		dn.lp = l.next()
	}
	return dn
}

// divergence returns D at every position of the chunk, cfg's divergence of the
// student's distribution from the teacher's inputs.
//
//	logits: [n, vocab] the student's → [1, n], logits' dtype
func (dn distillNodes) divergence(cfg credit.DistillConfig, logits *Node) *Node {
	var d *Node
	if dn.view.Mode == credit.DistillTopK {
		d = distillTopK(cfg, logits, dn.ids, dn.lp, dn.tail)
	} else {
		d = distillFull(cfg, logits, dn.lp)
	}
	return ExpandAxes(d, 0)
}
