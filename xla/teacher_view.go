package xla

import (
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
)

// TeacherView is what a teacher pass keeps of each scored position besides the
// log-prob of the token that follows (credit.distill, docs/distillation.md): nothing
// (mode sampled_token, the zero value), the k most likely ids with their log-probs
// and the tail's log-mass (topk), or the whole log-distribution (full).
//
// Mode full keeps [span, vocab] float32 per hinted span on the host, which is only
// reasonable for small vocabularies (the byte tokenizer: 1 KiB a position); the
// trainer refuses it above MaxFullVocab. Recomputing the teacher's logits inside the
// training pass instead would need the teacher's forward (its own prefix and the hint
// inserted) in every gradient chunk: a second model pass per chunk for every mode,
// where keeping costs memory only where the vocabulary is small.
//
// In mode topk, IDs says whose ids are kept (credit.DistillConfig.TopKIDs): the
// teacher's own k (teacher), the student's k, which the pass takes as an input per
// position and gathers the teacher at (student), or the student's k followed by the
// teacher's k with those the student's already hold left empty, id −1 (union).
type TeacherView struct {
	Mode credit.DistillMode
	K    int            // the kept ids per position, mode topk
	IDs  credit.TopKIDs // whose ids, mode topk ("" is teacher)
}

// MaxFullVocab is the largest vocabulary distillation mode full is trained on: the
// teacher's whole log-distribution is kept on the host for every hinted position
// (4·vocab bytes a position; 128 KiB at this size). Larger vocabularies use topk.
const MaxFullVocab = 32768

// viewOf returns the TeacherView a distillation config needs.
func viewOf(c credit.DistillConfig) TeacherView {
	switch c.Mode {
	case credit.DistillTopK:
		ids := c.TopKIDs
		if ids == "" {
			ids = credit.DefaultDistillConfig().TopKIDs // a config not validated yet
		}
		return TeacherView{Mode: credit.DistillTopK, K: c.TopK, IDs: ids}
	case credit.DistillFull:
		return TeacherView{Mode: credit.DistillFull}
	}
	return TeacherView{}
}

// own is the view of a pass that keeps its own top k (the student's pass that picks
// the ids of IDs student and union).
func (v TeacherView) own() TeacherView {
	return TeacherView{Mode: credit.DistillTopK, K: v.K, IDs: credit.IDsTeacher}
}

// takesIDs reports whether the pass takes the student's ids as an input (topk with
// ids student or union).
func (v TeacherView) takesIDs() bool {
	return v.Mode == credit.DistillTopK && (v.IDs == credit.IDsStudent || v.IDs == credit.IDsUnion)
}

// width is a kept row's width for a vocabulary of vocab ids: vocab in mode full; in
// topk min(k, vocab), twice that for union (unless k covers the vocabulary).
func (v TeacherView) width(vocab int) int {
	if v.Mode != credit.DistillTopK {
		return vocab
	}
	k := min(v.K, vocab)
	if v.IDs == credit.IDsUnion && k < vocab {
		return 2 * k
	}
	return k
}

// keeps reports whether v keeps anything beyond the sampled token's log-prob.
func (v TeacherView) keeps() bool {
	return v.Mode == credit.DistillTopK || v.Mode == credit.DistillFull
}

// outputs are what v keeps of a chunk's logits, each row one position, with in the
// inputs of nInputs (the student's ids [n, k'] int32 where takesIDs):
//
//	topk: logits [n, vocab] → ids [n, w] int32, log-probs [n, w], tail [n] (w = width)
//	full: logits [n, vocab] → log-probs [n, vocab]
//	sampled_token: nothing
func (v TeacherView) outputs(logits *Node, in []*Node) []*Node {
	switch v.Mode {
	case credit.DistillTopK:
		if !v.takesIDs() {
			ids, lp, tail := teacherTopK(logits, v.K)
			return []*Node{ids, lp, tail}
		}
		ids, lp, tail := teacherAt(logits, in[0], v.IDs == credit.IDsUnion && v.K < logits.Shape().Dimensions[1], v.K)
		return []*Node{ids, lp, tail}
	case credit.DistillFull:
		logits = StopGradient(logits)
		return []*Node{Sub(logits, ExpandAxes(rowLogSumExp(logits), -1))}
	}
	return nil
}

// TeacherDist is one hinted span's kept teacher distributions: row r is the
// teacher's prediction of y_{Start+r}, the position whose log-prob is the span's
// r-th teacher log-prob. Float32, as the device made them.
type TeacherDist struct {
	Mode credit.DistillMode
	// K is the row width: TeacherView.width.
	K int
	// IDs are the kept ids, [rows, K] (topk only); −1 is an empty slot (union).
	IDs []int32
	// LogProbs are the log-probs of IDs (topk) or of every id (full), [rows, K], nats.
	LogProbs []float32
	// Tail is log of the mass of every id not in the row's IDs, [rows] (topk only);
	// −Inf when K is the vocabulary.
	Tail []float32
}

// Rows is the number of positions d holds.
func (d TeacherDist) Rows() int {
	if d.K == 0 {
		return 0
	}
	return len(d.LogProbs) / d.K
}

// newTeacherDist is an empty TeacherDist of rows positions for view v.
func newTeacherDist(v TeacherView, vocab, rows int) TeacherDist {
	d := TeacherDist{Mode: v.Mode, K: v.width(vocab)}
	if v.Mode == credit.DistillTopK {
		d.IDs, d.Tail = make([]int32, rows*d.K), make([]float32, rows)
	}
	d.LogProbs = make([]float32, rows*d.K)
	return d
}

// viewSink is a teacher pass's way of keeping a TeacherView: the two scoring
// executables that output it (contiguous and paged caches, newScoreExec) and, for
// one pass, where the chunks' extra outputs go.
type viewSink struct {
	view        TeacherView
	label       string // names the compiled programs (scorestats)
	step, paged *modelExec
	// take gets a chunk's extra outputs (n positions from index off of the sequence
	// run); nil drops them.
	take func(off, n int, out []*tensors.Tensor)
	// args gives a chunk's extra inputs (view.nInputs of them), for the n positions
	// from index off of the sequence run.
	args func(off, n int) []any
}

// inputs returns k.args(off, n), nothing for a nil k or args.
func (k *viewSink) inputs(off, n int) []any {
	if k == nil || k.args == nil {
		return nil
	}
	return k.args(off, n)
}

// nInputs is how many inputs view.outputs takes per chunk (after chunkArgs).
func (v TeacherView) nInputs() int {
	if v.takesIDs() {
		return 1
	}
	return 0
}

// nOutputs is how many tensors view.outputs gives.
func (v TeacherView) nOutputs() int {
	switch v.Mode {
	case credit.DistillTopK:
		return 3
	case credit.DistillFull:
		return 1
	}
	return 0
}

// consume passes the chunk's extra outputs (read from r) to k.take and frees them;
// a nil k reads nothing.
func (k *viewSink) consume(r *list[*tensors.Tensor], off, n int) {
	if k == nil {
		return
	}
	out := r.take(k.view.nOutputs())
	if k.take != nil {
		k.take(off, n, out)
	}
	finalize(out)
}

// sinkFor returns a viewSink of v (its executables made on first use); the caller
// sets take. Called with s.mu held.
func (s *Scorer) sinkFor(v TeacherView) (*viewSink, error) {
	if s.views == nil {
		s.views = map[TeacherView]*viewSink{}
	}
	if k, ok := s.views[v]; ok {
		c := *k
		return &c, nil
	}
	if v.Mode == credit.DistillFull && s.model.Config.VocabSize > MaxFullVocab {
		return nil, fmt.Errorf("distill mode full keeps the teacher's whole distribution: vocabulary %d is over %d, use topk", s.model.Config.VocabSize, MaxFullVocab)
	}
	nl := s.model.Config.NumHiddenLayers
	k := &viewSink{view: v, label: string(v.Mode)}
	if v.Mode == credit.DistillTopK {
		k.label = fmt.Sprintf("topk%d", v.K)
		if v.takesIDs() {
			k.label += string(v.IDs)
		}
	}
	var err error
	if k.step, err = newScoreExec(s.backend, s.model, func(l *list[*Node]) graphCache { return takeContiguous(l, nl) }, v); err != nil {
		return nil, fmt.Errorf("teacher view %s: %w", k.label, err)
	}
	if k.paged, err = newScoreExec(s.backend, s.model, func(l *list[*Node]) graphCache { return takePaged(l, nl) }, v); err != nil {
		return nil, fmt.Errorf("teacher view %s: %w", k.label, err)
	}
	s.views[v] = k
	c := *k
	return &c, nil
}

// keepRows returns a take that copies the rows of a chunk into d: chunk position i
// (index off+i of the sequence run) predicts index off+i+1, which is d's row
// off+i+1−first (first: the sequence index of the span's first token); rows outside
// d are dropped.
func keepRows(d *TeacherDist, first int) func(off, n int, out []*tensors.Tensor) {
	rows := d.Rows()
	return func(off, n int, out []*tensors.Tensor) {
		var ids []int32
		var lp, tail []float32
		if d.Mode == credit.DistillTopK {
			ids = tensors.MustCopyFlatData[int32](out[0])
			lp = tensors.MustCopyFlatData[float32](out[1])
			tail = tensors.MustCopyFlatData[float32](out[2])
		} else {
			lp = tensors.MustCopyFlatData[float32](out[0])
		}
		K := d.K
		for i := range n {
			r := off + i + 1 - first
			if r < 0 || r >= rows {
				continue
			}
			copy(d.LogProbs[r*K:(r+1)*K], lp[i*K:(i+1)*K])
			if ids != nil {
				copy(d.IDs[r*K:(r+1)*K], ids[i*K:(i+1)*K])
				d.Tail[r] = tail[i]
			}
		}
	}
}

// padRow fills row i of a chunk's teacher inputs with a valid stand-in distribution
// for a position without a teacher (weight 0): ids 0…K−1 each at −log vocab and the
// rest of the mass in the tail, so the divergence there is finite and its gradient,
// times the weight 0, is 0.
func padRow(vocab, K int, ids []int32, lp, tail []float32, i int) {
	u := float32(-math.Log(float64(vocab)))
	for j := range K {
		lp[i*K+j] = u
		if ids != nil {
			ids[i*K+j] = int32(j)
		}
	}
	if tail != nil {
		t := math.Inf(-1)
		if K < vocab {
			t = math.Log(float64(vocab-K) / float64(vocab))
		}
		tail[i] = float32(t)
	}
}
