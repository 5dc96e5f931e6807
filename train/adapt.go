package train

import (
	"fmt"
	"math"
	"slices"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/chatformat"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// Rule is the one trainable-token rule (docs/design.md "Rollout file", Trainable token). Token i of a
// rollout is trained when it lies in a policy segment (assistant, reasoning,
// tool_call), has a sampler log-prob, and is not position 0, which has no context to
// predict it from. A rollout with no sampler log-prob at all (a demonstration, a
// person's corrected answer, a conversation recorded from an engine that returned
// none) is trained only when AllowNoSampler (credit.allow_no_sampler, importance
// weight 1), and then every token of its policy segments is, except the role header
// the harness wrote at a segment's start (Header), which is context. The daemon's
// loop and the efficacy experiment both use it, through ToTrainer.
type Rule struct {
	AllowNoSampler bool
	// Header is the harness's role header that opens a policy turn, as token ids
	// ("<|im_start|>assistant\n" in ChatML; HeaderFor). A policy segment of a
	// rollout without log-probs that begins with it trains from the token after it;
	// one that does not (a tool call continuing a turn) trains whole. Empty: no
	// header.
	Header []int32
}

// NewRule returns the rule of credit config cfg for a policy with tokenizer tok: its
// allow_no_sampler and tok's assistant header (HeaderFor).
func NewRule(cfg credit.Config, tok tokenizer.Tokenizer) Rule {
	return Rule{AllowNoSampler: cfg.AllowNoSampler, Header: HeaderFor(tok)}
}

// HeaderFor returns the ids of the header that opens an assistant turn in tok's chat
// format (chatformat.Detect: ChatML, Llama 3, DeepSeek V3 or the byte tokenizer's),
// or nil when tok has none or its format has no such header (Mistral).
func HeaderFor(tok tokenizer.Tokenizer) []int32 {
	if f, ok := chatformat.Detect(tok); ok && f.Assistant != "" {
		return tok.Encode(f.Assistant)
	}
	return nil
}

// Mask returns the trainable tokens of r under the rule, one bool per token.
func (ru Rule) Mask(r *rollout.Rollout) []bool {
	m := make([]bool, len(r.Tokens))
	if r.HasLogProbs() {
		for i := 1; i < len(m); i++ {
			m[i] = r.Trainable(i)
		}
		return m
	}
	if !ru.AllowNoSampler {
		return m
	}
	for _, s := range r.Segments {
		if !s.Kind.IsPolicy() {
			continue
		}
		start, end := int(s.Start), int(s.End)
		if h := len(ru.Header); h > 0 && end-start >= h && slices.Equal(r.Tokens[start:start+h], ru.Header) {
			start += h
		}
		for i := max(start, 1); i < end; i++ {
			m[i] = true
		}
	}
	return m
}

// Why says why r has no trainable token under the rule, for a step that trains
// nothing; "" when it has one.
func (ru Rule) Why(r *rollout.Rollout) string {
	if slices.Contains(ru.Mask(r), true) {
		return ""
	}
	policy := false
	for _, s := range r.Segments {
		policy = policy || s.Kind.IsPolicy()
	}
	switch {
	case !policy:
		return "no assistant, reasoning or tool_call segment"
	case !r.HasLogProbs() && !ru.AllowNoSampler:
		return "no sampler log-probs, and credit.allow_no_sampler is false"
	case !r.HasLogProbs():
		return "its policy segments hold only the role header"
	default:
		return "no policy token after position 0 has a sampler log-prob"
	}
}

// entry is one rollout of the batch as the trainer sees it. hints are the hints of
// xr.Hints, in the same order: exactly what is scored, and so what its credit row
// reports.
type entry struct {
	item      *Item
	xr        credit.Sequence
	hints     []teacher.Hint
	trainable int // tokens of Rule.Mask
	all       int // every token a step runs for it: the rollout, each hint and its re-scored span
}

// ToTrainer converts a rollout and the hints to score with it to the trainer's input,
// with the trainable mask of rule (Rule.Mask) and each hint's own empty-hint template
// (teacher.Hint.Empty), built with its tokens, so a teacher reload between hinting and
// scoring cannot mismatch them. The rollout is scored at its sampling temperature
// (rollout.Rollout.ScoringTemperature: 1 without one, or greedy). The daemon's loop
// and the efficacy experiment both use it.
func ToTrainer(r *rollout.Rollout, hints []teacher.Hint, rule Rule) credit.Sequence {
	T := len(r.Tokens)
	xr := credit.Sequence{ID: r.ID, TaskID: r.TaskID, Tokens: r.Tokens, Sampler: make([]float64, T),
		Trainable: rule.Mask(r), Reward: float64(r.Reward), HasReward: r.HasReward, Temperature: r.ScoringTemperature()}
	for i := range T {
		if lp, ok := r.LogProb(i); ok {
			xr.Sampler[i] = float64(lp)
		} else {
			xr.Sampler[i] = math.NaN()
		}
	}
	for _, h := range hints {
		xr.Hints = append(xr.Hints, credit.Hint{InsertAt: int(h.InsertAt), End: int(h.End), Tokens: h.Tokens, Empty: h.Empty})
	}
	return xr
}

// adapt converts an item (a rollout and its teacher hints) to a batch entry under
// rule.
func adapt(it *Item, rule Rule) *entry {
	r := it.Rollout
	e := &entry{item: it, hints: append([]teacher.Hint(nil), it.hints.Hints...), all: len(r.Tokens)}
	e.xr = ToTrainer(r, e.hints, rule)
	for _, m := range e.xr.Trainable {
		if m {
			e.trainable++
		}
	}
	for _, h := range e.hints {
		e.all += len(h.Tokens) + int(h.End-h.InsertAt)
	}
	return e
}

// fits reports, wrapping xla.ErrTooLong, a rollout or hinted sequence longer than
// maxPos positions: scoring it would fail the whole step.
func (e *entry) fits(maxPos int) error {
	if n := len(e.xr.Tokens); n > maxPos {
		return fmt.Errorf("rollout %q: %d tokens, max_position_embeddings is %d: %w", e.xr.ID, n, maxPos, xla.ErrTooLong)
	}
	for k, h := range e.xr.Hints {
		if n := h.End + len(h.Tokens); n > maxPos {
			return fmt.Errorf("rollout %q: hinted segment %d: %d positions with the hint, max_position_embeddings is %d: %w",
				e.xr.ID, e.hints[k].Segment, n, maxPos, xla.ErrTooLong)
		}
	}
	return nil
}

// record is what the credit rows say about how their hints were trained: the loss
// (credit.distill) and how many of the teacher's alternatives each hinted position
// keeps (train.credit_file_top_k).
type record struct {
	distill credit.DistillConfig
	top     int
}

// creditRow builds the credit output row of e from the credit the trainer computed
// at the weights before the update: in (the scored log-probs), res, and dists (the
// teacher distributions kept per hint span in modes topk and full, else nil). Its
// hints are the ones scored, with the positions and tokens the teacher pass used,
// and say what the teacher saw and which loss they trained with (rec).
func creditRow(e *entry, in *credit.Sequence, res *credit.Result, dists []xla.TeacherDist, rec record, step int64) (creditfile.Row, error) {
	r := e.item.Rollout
	T := len(r.Tokens)
	if len(in.Hints) != len(e.xr.Hints) {
		return creditfile.Row{}, fmt.Errorf("credit row of %q: %d hinted spans scored, %d hints sent", r.ID, len(in.Hints), len(e.xr.Hints))
	}
	row := creditfile.Row{RolloutID: r.ID, TaskID: r.TaskID, Tokens: append([]int32(nil), r.Tokens...),
		Step: step, PolicyVersion: r.PolicyVersion, TeacherVersion: step - 1, Reward: r.Reward, HasReward: r.HasReward,
		OutcomeAdv: float32(res.AOut), LossMask: make([]bool, T), Student: make([]float32, T),
		Teacher: make([]float32, T), Advantages: make([]float32, T),
		Base: make([]float32, T), Delta: make([]float32, T), Rho: make([]float32, T), Sampler: make([]float32, T),
		Tokenizer: r.Tokenizer, Temperature: float32(in.Temp())}
	// base_t = q_t(h) − Δ_t of the first span covering t (credit's rule for
	// overlapping spans): the base (s_t or q_t(∅)) credit measured Δ against.
	q, qN := make([]float64, T), make([]int, T)
	for _, span := range in.Hints {
		for t := span.InsertAt; t < span.End; t++ {
			if qN[t] == 0 {
				q[t] = span.Teacher[t-span.InsertAt]
			}
			qN[t]++
		}
	}
	for t := range T {
		row.LossMask[t] = in.Trainable[t] && !res.Skipped
		row.Student[t] = float32(in.Student[t])
		row.Teacher[t] = float32(math.NaN())
		row.Advantages[t] = float32(res.Adv[t])
		d := valueAt(res.Delta, t, math.NaN())
		row.Delta[t], row.Base[t] = float32(d), float32(math.NaN())
		if !math.IsNaN(d) && qN[t] > 0 {
			row.Base[t] = float32(q[t] - d)
		}
		row.Rho[t] = float32(valueAt(res.Rho, t, 0))
		row.Sampler[t] = float32(valueAt(in.Sampler, t, math.NaN()))
	}
	row.Segments = make([]creditfile.Segment, len(r.Segments))
	for k, s := range r.Segments {
		cs := creditfile.Segment{Start: s.Start, End: s.End, Kind: s.KindName, Tool: s.Tool}
		if cs.Kind == "" {
			cs.Kind = s.Kind.String()
		}
		switch s.Status {
		case rollout.StatusOK:
			cs.Status = "ok"
		case rollout.StatusError:
			cs.Status = "error"
		}
		row.Segments[k] = cs
	}
	for k, span := range in.Hints {
		for t := span.InsertAt; t < span.End; t++ {
			if math.IsNaN(float64(row.Teacher[t])) { // the first span covering t
				row.Teacher[t] = float32(span.Teacher[t-span.InsertAt])
			}
		}
		h, sent := e.hints[k], e.xr.Hints[k]
		ch := creditfile.Hint{Segment: int32(h.Segment), InsertAt: int32(span.InsertAt),
			End: int32(span.End), Source: h.Source, Reason: string(h.Reason), Text: h.Text,
			Tokens: append([]int32(nil), sent.Tokens...), Context: contextKind(h), LossMode: string(rec.distill.Mode),
			TeacherLogProbs: make([]float32, len(span.Teacher))}
		if rec.distill.Mode == credit.DistillTopK || rec.distill.Mode == credit.DistillFull {
			ch.Divergence = string(rec.distill.Divergence)
			if rec.distill.Divergence == credit.DivJSD {
				ch.JSDAlpha = float32(rec.distill.JSDAlpha)
			}
		}
		for i, q := range span.Teacher {
			ch.TeacherLogProbs[i] = float32(q)
		}
		if k < len(dists) && rec.top > 0 {
			d := dists[k]
			if n := span.End - span.InsertAt; d.Rows() != n {
				return creditfile.Row{}, fmt.Errorf("credit row of %q: hint %d: %d teacher distributions for %d positions", r.ID, k, d.Rows(), n)
			}
			ch.TopIDs, ch.TopLogProbs = teacherTop(d, rec.top)
		}
		row.Hints = append(row.Hints, ch)
	}
	return row, nil
}

// contextKind names what h's inserted turn held (teacher.Context.Kind); a hint
// made without the hinter (Context unset) holds its text alone.
func contextKind(h teacher.Hint) string {
	if k := h.Context.Kind(); k != "" {
		return k
	}
	if h.Text != "" {
		return "hint"
	}
	return ""
}

// teacherTop returns, for each position of d, its n most likely ids (fewer when the
// row is narrower), most likely first, and their log-probs. Ties keep the row's order;
// empty slots (id −1, topk_ids union) are skipped.
func teacherTop(d xla.TeacherDist, n int) ([][]int32, [][]float32) {
	rows := d.Rows()
	n = min(n, d.K)
	ids, lps := make([][]int32, rows), make([][]float32, rows)
	for r := range rows {
		lp := d.LogProbs[r*d.K : (r+1)*d.K]
		top := make([]int, 0, n+1) // indices into the row, log-prob descending
		for j, v := range lp {
			if d.IDs != nil && d.IDs[r*d.K+j] < 0 {
				continue // a union's empty slot
			}
			if len(top) == n && v <= lp[top[n-1]] {
				continue
			}
			at := len(top)
			for at > 0 && v > lp[top[at-1]] {
				at--
			}
			top = slices.Insert(top, at, j)
			if len(top) > n {
				top = top[:n]
			}
		}
		ids[r], lps[r] = make([]int32, len(top)), make([]float32, len(top))
		for i, j := range top {
			ids[r][i], lps[r][i] = int32(j), lp[j]
			if d.IDs != nil {
				ids[r][i] = d.IDs[r*d.K+j]
			}
		}
	}
	return ids, lps
}

// valueAt returns v[t], or def when v does not reach t (a result without that
// column, as a skipped rollout's may be).
func valueAt(v []float64, t int, def float64) float64 {
	if t < len(v) {
		return v[t]
	}
	return def
}

// withSiblings returns batch with the step-wide teacher contexts of siblings applied
// (Options.Siblings): an entry whose hints changed is adapted again with them (under rule), unless
// the longer context no longer fits maxPos positions, in which case it keeps its own
// hints (and the second result counts it). Entries are replaced, never modified: the
// items keep the teacher's result as it was.
func withSiblings(batch []*entry, siblings func([]teacher.StepRollout) [][]teacher.Hint, rule Rule, maxPos int) ([]*entry, int) {
	step := make([]teacher.StepRollout, len(batch))
	for i, e := range batch {
		// Every rollout of a batch is accepted: the spool only hands out accepted ones.
		step[i] = teacher.StepRollout{Rollout: e.item.Rollout, Accepted: true, Hints: e.hints}
	}
	hs := siblings(step)
	out := make([]*entry, len(batch))
	tooLong := 0
	for i, e := range batch {
		out[i] = e
		if i >= len(hs) || sameHints(hs[i], e.hints) {
			continue
		}
		ne := &entry{item: e.item, hints: hs[i], all: len(e.item.Rollout.Tokens)}
		ne.xr = ToTrainer(e.item.Rollout, ne.hints, rule)
		ne.trainable = e.trainable
		for _, h := range ne.hints {
			ne.all += len(h.Tokens) + int(h.End-h.InsertAt)
		}
		if ne.fits(maxPos) != nil {
			tooLong++
			continue
		}
		out[i] = ne
	}
	return out, tooLong
}

// sameHints reports whether a and b are the same hints with the same tokens.
func sameHints(a, b []teacher.Hint) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if a[k].InsertAt != b[k].InsertAt || a[k].End != b[k].End || !slices.Equal(a[k].Tokens, b[k].Tokens) {
			return false
		}
	}
	return true
}
