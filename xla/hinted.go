package xla

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
)

// ScoreHinted returns, for each hinted segment k, q_t = log π(y_t | y_<a, h_k,
// y_a…y_<t) for t in [a_k, b_k) (nats, End−Start values per segment): h_k is
// segs[k].Hint, inserted before position a_k = segs[k].Start (it reads only Start, End
// and Hint).
//
// prefix is a KV cache of the rollout from this Scorer's model (Score's second
// result) that covers every segment's prefix y_<a; it is shared, not modified, and
// stays the caller's to Close. With a nil prefix, or one from another model (a
// frozen or EMA teacher has separate weights), the prefix up to the last segment's
// start is computed first with this Scorer's own weights. Each segment then runs
// only its hint and its own tokens, chunk by chunk, on a copy of the prefix.
func (s *Scorer) ScoreHinted(ctx context.Context, tokens []int32, prefix *KVCache, segs []credit.Hint) ([][]float32, error) {
	q, _, err := s.ScoreHintedAt(ctx, tokens, prefix, segs, TeacherView{}, nil, 1)
	return q, err
}

// ScoreHintedView is ScoreHinted that also keeps, per segment, what view asks of the
// teacher's distribution at each of the segment's positions (TeacherDist, one row
// per position of [Start, End)): the top k with the tail's mass, or the whole
// log-distribution. It is computed chunk by chunk, as scoring is, from each chunk's
// logits: the largest tensor is one chunk's [chunk, vocab] logits, and what leaves
// the device is [End−Start, k] (topk) or [End−Start, vocab] (full). A zero view
// returns nil dists.
func (s *Scorer) ScoreHintedView(ctx context.Context, tokens []int32, prefix *KVCache, segs []credit.Hint, view TeacherView) ([][]float32, []TeacherDist, error) {
	return s.ScoreHintedAt(ctx, tokens, prefix, segs, view, nil, 1)
}

// ScoreHintedAt is ScoreHintedView for a view that takes the student's ids (topk_ids
// student or union): student[k] holds, for each position of segment k, the
// student's top k (the IDs of a pass with view.own(), such as StudentTopK's), and the
// kept rows are the teacher's log-probs at those ids (and, for union, at its own top
// k), with the teacher's exact tail. Other views ignore student.
//
// temp is the rollout's sampling temperature (ScoreAt): the teacher's log-probs and
// kept distributions are those of its logits divided by temp (ScoreHinted and
// ScoreHintedView: 1).
func (s *Scorer) ScoreHintedAt(ctx context.Context, tokens []int32, prefix *KVCache, segs []credit.Hint, view TeacherView, student []TeacherDist, temp float64) ([][]float32, []TeacherDist, error) {
	if len(segs) == 0 {
		return nil, nil, nil
	}
	if !(temp > 0) || math.IsInf(temp, 0) {
		return nil, nil, fmt.Errorf("score hinted: temperature %g: want a finite value > 0", temp)
	}
	if view.takesIDs() {
		if len(student) != len(segs) {
			return nil, nil, fmt.Errorf("score hinted: top-k ids %s: %d student rows for %d segments", view.IDs, len(student), len(segs))
		}
		k := min(view.K, s.model.Config.VocabSize)
		for i, d := range student {
			if d.K != k || d.Rows() != segs[i].End-segs[i].InsertAt {
				return nil, nil, fmt.Errorf("score hinted: segment %d: student ids are %d×%d, want %d×%d", i, d.Rows(), d.K, segs[i].End-segs[i].InsertAt, k)
			}
		}
	}
	if view.Mode == credit.DistillTopK && view.K < 1 {
		return nil, nil, fmt.Errorf("score hinted: top k %d must be at least 1", view.K)
	}
	if err := s.checkTokens(tokens); err != nil {
		return nil, nil, err
	}
	need := 0 // prefix positions needed
	for i, sg := range segs {
		if sg.InsertAt < 0 || sg.End <= sg.InsertAt || sg.End > len(tokens) {
			return nil, nil, fmt.Errorf("score hinted: segment %d: [%d, %d) is not a non-empty range of %d tokens", i, sg.InsertAt, sg.End, len(tokens))
		}
		if len(sg.Tokens) == 0 && sg.InsertAt == 0 {
			return nil, nil, fmt.Errorf("score hinted: segment %d: no hint and no context before position 0", i)
		}
		if err := s.checkTokens(sg.Tokens); err != nil {
			return nil, nil, fmt.Errorf("score hinted: segment %d: hint: %w", i, err)
		}
		if err := s.checkSeq(sg.End + len(sg.Tokens)); err != nil {
			return nil, nil, fmt.Errorf("score hinted: segment %d: %w", i, err)
		}
		need = max(need, sg.InsertAt)
	}
	if prefix == nil || prefix.model != s.model {
		if need == 0 { // every segment starts at 0 with a hint: no prefix
			need = 1
		}
		_, own, err := s.Score(ctx, tokens[:need])
		if err != nil {
			return nil, nil, fmt.Errorf("score hinted: teacher prefix: %w", err)
		}
		defer own.Close()
		prefix = own
	} else if prefix.Len < need {
		return nil, nil, fmt.Errorf("score hinted: prefix cache holds %d positions, segments need %d", prefix.Len, need)
	}
	if prefix.closed() {
		return nil, nil, errors.New("score hinted: prefix cache is closed")
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	var sink *viewSink
	var dists []TeacherDist
	if view.keeps() {
		var err error
		if sink, err = s.sinkFor(view); err != nil {
			return nil, nil, fmt.Errorf("score hinted: %w", err)
		}
		dists = make([]TeacherDist, len(segs))
	}
	out := make([][]float32, len(segs))
	for i, sg := range segs {
		// z is what runs after the prefix; q_t is the prediction of y_t, made at z's
		// previous position. With no hint, y_{a-1} is rerun at its own position.
		var z []int32
		var pos int
		if len(sg.Tokens) > 0 {
			z = append(slices.Clone(sg.Tokens), tokens[sg.InsertAt:sg.End]...)
			pos = sg.InsertAt
		} else {
			z = slices.Clone(tokens[sg.InsertAt-1 : sg.End])
			pos = sg.InsertAt - 1
		}
		first := len(z) - (sg.End - sg.InsertAt) // index in z of y_a
		q := make([]float32, sg.End-sg.InsertAt)
		if sink != nil {
			dists[i] = newTeacherDist(view, s.model.Config.VocabSize, len(q))
			sink.take = keepRows(&dists[i], first)
			if view.takesIDs() {
				sink.args = idsArgs(student[i], first)
			}
		}
		c := &KVCache{model: s.model, Len: pos, layout: prefix.layout.share()}
		err := s.run(ctx, c, z, pos, temp, func(j int, lp float32) {
			if k := j + 1 - first; k >= 0 && k < len(q) {
				q[k] = lp
			}
		}, sink)
		c.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("score hinted: segment %d: %w", i, err)
		}
		out[i] = q
	}
	return out, dists, nil
}

// StudentTopK returns the student's own top k at each position of each segment (the
// ids of topk_ids student and union): the segment's tokens re-scored after the
// student's prefix with no hint (ScoreHintedView with view.own()), so row r holds the
// student's prediction of y_{Start+r}. prefix is the student's KV cache (Score's).
// temp is the rollout's sampling temperature (ScoreHintedAt; it does not change
// which ids are the top k, only their kept log-probs).
func (s *Scorer) StudentTopK(ctx context.Context, tokens []int32, prefix *KVCache, segs []credit.Hint, view TeacherView, temp float64) ([]TeacherDist, error) {
	plain := make([]credit.Hint, len(segs))
	for i, sg := range segs {
		plain[i] = credit.Hint{InsertAt: sg.InsertAt, End: sg.End}
	}
	_, d, err := s.ScoreHintedAt(ctx, tokens, prefix, plain, view.own(), nil, temp)
	if err != nil {
		return nil, fmt.Errorf("student top k: %w", err)
	}
	return d, nil
}

// idsArgs returns a sink's args that give a chunk its rows of student ids d: chunk
// position i (index off+i of the run) predicts index off+i+1, d's row off+i+1−first;
// positions outside d get ids 0…k−1 (their rows are dropped).
func idsArgs(d TeacherDist, first int) func(off, n int) []any {
	rows, K := d.Rows(), d.K
	return func(off, n int) []any {
		ids := make([]int32, n*K)
		for i := range n {
			r := off + i + 1 - first
			if r < 0 || r >= rows {
				for j := range K {
					ids[i*K+j] = int32(j)
				}
				continue
			}
			copy(ids[i*K:(i+1)*K], d.IDs[r*K:(r+1)*K])
		}
		return []any{tensors.FromFlatDataAndDimensions(ids, n, K)}
	}
}
