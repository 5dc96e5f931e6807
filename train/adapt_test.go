package train

import (
	"fmt"
	"math"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// hintedItem returns a synthetic rollout, resolved with the hints of a teacher
// whose template label is label, and that teacher.
func hintedItem(t *testing.T, label string) (*Item, *teacher.Hinter) {
	t.Helper()
	cfg := teacher.DefaultConfig()
	cfg.Template = teacher.Template{Preset: "bytes", Label: label}
	h, err := teacher.New(cfg, teacher.Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	opts := rollout.SynthOptions{Tokens: 2000, Seed: 3}
	for i := range 16 {
		r := rollout.Synthesize(opts, i)
		res, err := h.Run(t.Context(), r)
		require.NoError(t, err)
		if len(res.Hints) >= 2 {
			it := NewItem(&ledger.File{}, i, r)
			it.Resolve(res)
			return it, h
		}
	}
	t.Fatal("no synthetic rollout got two hints")
	return nil, nil
}

// TestAdaptKeepsEachHintsEmptyTemplate: the teacher is reloaded (SIGHUP) with
// another template between hinting and scoring; the q(∅) pass still gets the empty
// turn of the template that built each hint, not the new one.
func TestAdaptKeepsEachHintsEmptyTemplate(t *testing.T) {
	it, old := hintedItem(t, "Hint: ")
	cfg := teacher.DefaultConfig()
	cfg.Template = teacher.Template{Preset: "bytes", Label: "Advice from a reviewer: "}
	reloaded, err := teacher.New(cfg, teacher.Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	require.NotEqual(t, old.Inserter().Empty(), reloaded.Inserter().Empty())

	e := adapt(it, Rule{})
	require.Len(t, e.xr.Hints, len(it.hints.Hints))
	for k, h := range e.xr.Hints {
		require.Equal(t, old.Inserter().Empty(), h.Empty, "hint %d", k)
		require.Equal(t, it.hints.Hints[k].Tokens, h.Tokens, "hint %d", k)
		wrapped, err := old.Inserter().Wrap(it.hints.Hints[k].Text)
		require.NoError(t, err)
		require.Equal(t, wrapped, h.Tokens, "hint %d is its own template's turn", k)
	}
}

// TestCreditRowCarriesTheScoredHints: the credit row reports the hints the trainer
// scored (positions from the scored spans, tokens as sent), even when the teacher's
// result is changed after the rollout was adapted; a row whose scored spans do not
// match the hints sent is an error, not a row with the wrong hints.
func TestCreditRowCarriesTheScoredHints(t *testing.T) {
	it, _ := hintedItem(t, "Hint: ")
	e := adapt(it, Rule{})
	sent := append([]teacher.Hint(nil), it.hints.Hints...)
	T := len(it.Rollout.Tokens)
	in := credit.Sequence{ID: it.Rollout.ID, Student: make([]float64, T), Trainable: e.xr.Trainable}
	for _, h := range e.xr.Hints {
		q := make([]float64, h.End-h.InsertAt)
		for i := range q {
			q[i] = -0.5
		}
		in.Hints = append(in.Hints, credit.Hint{InsertAt: h.InsertAt, End: h.End, Teacher: q})
	}
	res := credit.Result{Adv: make([]float64, T)}

	// The teacher's result changes after adaptation (a reused slice, a reload).
	it.hints.Hints[0].Text, it.hints.Hints[0].Tokens = "something else", []int32{1, 2, 3}
	it.hints.Hints = it.hints.Hints[:1]

	row, err := creditRow(e, &in, &res, nil, record{distill: credit.DefaultDistillConfig()}, 7)
	require.NoError(t, err)
	require.Len(t, row.Hints, len(sent))
	for k, h := range row.Hints {
		require.Equal(t, sent[k].Text, h.Text)
		require.Equal(t, sent[k].Source, h.Source)
		require.Equal(t, e.xr.Hints[k].Tokens, h.Tokens)
		require.EqualValues(t, in.Hints[k].InsertAt, h.InsertAt)
		require.EqualValues(t, in.Hints[k].End, h.End)
		require.EqualValues(t, -0.5, row.Teacher[h.InsertAt])
	}
	require.EqualValues(t, 7, row.Step)
	require.EqualValues(t, 6, row.TeacherVersion)
	require.True(t, math.IsNaN(float64(row.Teacher[0])))

	require.Equal(t, it.Rollout.Tokenizer, row.Tokenizer)
	require.Len(t, row.Segments, len(it.Rollout.Segments))
	for k, s := range it.Rollout.Segments {
		require.Equal(t, s.Start, row.Segments[k].Start)
		require.Equal(t, s.End, row.Segments[k].End)
		require.Equal(t, s.Kind.String(), row.Segments[k].Kind)
	}

	// Schema v2 per-token columns: Δ and ρ from the result, μ from the input, and
	// base_t = q_t(h) − Δ_t inside the spans.
	res.Delta, res.Rho, in.Sampler = make([]float64, T), make([]float64, T), make([]float64, T)
	for i := range T {
		res.Delta[i], res.Rho[i], in.Sampler[i] = math.NaN(), 0.5, -2
	}
	h0 := in.Hints[0]
	res.Delta[h0.InsertAt] = 0.25
	row, err = creditRow(e, &in, &res, nil, record{distill: credit.DefaultDistillConfig()}, 7)
	require.NoError(t, err)
	require.InDelta(t, -0.75, row.Base[h0.InsertAt], 1e-6)
	require.EqualValues(t, 0.25, row.Delta[h0.InsertAt])
	require.True(t, math.IsNaN(float64(row.Delta[0])) && math.IsNaN(float64(row.Base[0])))
	require.EqualValues(t, 0.5, row.Rho[1])
	require.EqualValues(t, -2, row.Sampler[1])

	in.Hints = in.Hints[:1]
	_, err = creditRow(e, &in, &res, nil, record{distill: credit.DefaultDistillConfig()}, 7)
	require.ErrorContains(t, err, fmt.Sprintf("1 hinted spans scored, %d hints sent", len(sent)))
}

// TestCreditRowRecordsTheTeachersView: schema v3 fields of each hint come from what
// was scored: the context kind of the hint the teacher made, the loss the step ran,
// the teacher's log-prob of the sampled tokens, and its top alternatives from the
// distributions the teacher pass kept (topk rows as kept; full rows ranked here).
func TestCreditRowRecordsTheTeachersView(t *testing.T) {
	it, _ := hintedItem(t, "Hint: ")
	it.hints.Hints[1].Context = teacher.Context{Sibling: "a solution", Feedback: "E404", Hint: it.hints.Hints[1].Text}
	e := adapt(it, Rule{})
	T := len(it.Rollout.Tokens)
	in := credit.Sequence{ID: it.Rollout.ID, Student: make([]float64, T), Trainable: e.xr.Trainable}
	var dists []xla.TeacherDist
	for k, h := range e.xr.Hints {
		n := h.End - h.InsertAt
		q := make([]float64, n)
		// topk rows of width 3: ids r, r+1, r+2 at log-probs −0.1·(k+1), −1, −2.
		d := xla.TeacherDist{Mode: credit.DistillTopK, K: 3, IDs: make([]int32, 3*n), LogProbs: make([]float32, 3*n), Tail: make([]float32, n)}
		for r := range n {
			q[r] = -0.25 * float64(r)
			for j := range 3 {
				d.IDs[3*r+j] = int32(r + j)
			}
			d.LogProbs[3*r], d.LogProbs[3*r+1], d.LogProbs[3*r+2] = -0.1*float32(k+1), -1, -2
		}
		in.Hints = append(in.Hints, credit.Hint{InsertAt: h.InsertAt, End: h.End, Teacher: q})
		dists = append(dists, d)
	}
	res := credit.Result{Adv: make([]float64, T)}
	cfg := credit.DefaultDistillConfig()
	cfg.Mode, cfg.Divergence = credit.DistillTopK, credit.DivJSD
	row, err := creditRow(e, &in, &res, dists, record{distill: cfg, top: 2}, 7)
	require.NoError(t, err)
	h0, h1 := row.Hints[0], row.Hints[1]
	require.Equal(t, "hint", h0.Context)
	require.Equal(t, "sibling+feedback+hint", h1.Context)
	require.Equal(t, "topk", h0.LossMode)
	require.Equal(t, "jsd", h0.Divergence)
	require.EqualValues(t, 0.5, h0.JSDAlpha)
	n := int(h0.End - h0.InsertAt)
	require.Len(t, h0.TeacherLogProbs, n)
	require.EqualValues(t, -0.5, h0.TeacherLogProbs[2])
	require.Len(t, h0.TopIDs, n)
	require.Equal(t, []int32{4, 5}, h0.TopIDs[4], "the first two of the kept row")
	require.Equal(t, []float32{-0.2, -1}, h1.TopLogProbs[4])

	// Mode full: the row is the whole distribution; the top come out ranked, ties in
	// id order.
	full := xla.TeacherDist{Mode: credit.DistillFull, K: 6, LogProbs: []float32{-3, -0.5, -2, -0.5, -9, -0.1}}
	ids, lps := teacherTop(full, 4)
	require.Equal(t, [][]int32{{5, 1, 3, 2}}, ids)
	require.Equal(t, [][]float32{{-0.1, -0.5, -0.5, -2}}, lps)
	ids, _ = teacherTop(full, 10)
	require.Equal(t, []int32{5, 1, 3, 2, 0, 4}, ids[0], "n above the row's width keeps the whole row")

	// topk_ids union: an empty slot (id −1) is never an alternative.
	union := xla.TeacherDist{Mode: credit.DistillTopK, K: 4, IDs: []int32{7, 2, -1, 9}, LogProbs: []float32{-2, -0.5, float32(math.Inf(-1)), -1}, Tail: []float32{-3}}
	ids, lps = teacherTop(union, 5)
	require.Equal(t, [][]int32{{2, 9, 7}}, ids)
	require.Equal(t, [][]float32{{-0.5, -1, -2}}, lps)

	// sampled_token: no divergence and no alternatives, even if distributions came.
	row, err = creditRow(e, &in, &res, nil, record{distill: credit.DefaultDistillConfig(), top: 5}, 7)
	require.NoError(t, err)
	require.Equal(t, "sampled_token", row.Hints[0].LossMode)
	require.Empty(t, row.Hints[0].Divergence)
	require.Nil(t, row.Hints[0].TopIDs)
	require.Len(t, row.Hints[0].TeacherLogProbs, n)

	// Distributions that do not match the span are an error, not a shifted record.
	dists[0].LogProbs, dists[0].IDs = dists[0].LogProbs[:3], dists[0].IDs[:3]
	_, err = creditRow(e, &in, &res, dists, record{distill: cfg, top: 2}, 7)
	require.ErrorContains(t, err, fmt.Sprintf("hint 0: 1 teacher distributions for %d positions", n))
}

// TestTrainableIsTheOneRule: the trainer's mask and the batch's token count both
// come from the rule, which never trains position 0.
func TestTrainableIsTheOneRule(t *testing.T) {
	r := rollout.Synthesize(rollout.SynthOptions{Tokens: 600, Seed: 9}, 0)
	rule := Rule{Header: HeaderFor(tokenizer.NewBytes())}
	e := adapt(&Item{Rollout: r}, rule)
	mask := rule.Mask(r)
	n := 0
	for i := range r.Tokens {
		require.Equal(t, i > 0 && r.Trainable(i), mask[i], "token %d", i)
		require.Equal(t, mask[i], e.xr.Trainable[i], "token %d", i)
		if mask[i] {
			n++
		}
	}
	require.False(t, e.xr.Trainable[0])
	require.Equal(t, n, e.trainable)
	require.Positive(t, n)
}

// TestDeviceCredit: every distillation mode trains on the device; full only on a
// vocabulary up to xla.MaxFullVocab (the byte tokenizer's, not qwen3's).
func TestDeviceCredit(t *testing.T) {
	c := credit.DefaultConfig()
	require.NoError(t, DeviceCredit(c, 151936))
	c.Distill.Mode = credit.DistillTopK
	require.NoError(t, DeviceCredit(c, 151936))
	c.Distill.Mode = credit.DistillFull
	require.NoError(t, DeviceCredit(c, 259))
	require.ErrorContains(t, DeviceCredit(c, 151936), "credit.distill.mode: full")
}

// TestWithSiblings: the failed rollout of a task is scored with the step's success of
// the same task in front of its hints; the item keeps the teacher's result; a context
// too long for the model keeps the rollout's own hints.
func TestWithSiblings(t *testing.T) {
	cfg := teacher.DefaultConfig()
	cfg.Template = teacher.Template{Preset: "bytes", Label: "Hint: "}
	cfg.Context.Sources = []string{teacher.ContextSibling}
	cfg.Context.Sibling.MaxTokens = 0
	h, err := teacher.New(cfg, teacher.Deps{Tokenizer: tokenizer.NewBytes(), Logger: zerolog.Nop()})
	require.NoError(t, err)
	var batch []*entry
	for i, reward := range []float32{0, 1} {
		r := rollout.Synthesize(rollout.SynthOptions{Tokens: 1500, Seed: 5}, i)
		r.TaskID, r.Reward, r.HasReward = "task", reward, true
		res, err := h.Run(t.Context(), r)
		require.NoError(t, err)
		it := NewItem(&ledger.File{}, i, r)
		it.Resolve(res)
		batch = append(batch, adapt(it, Rule{}))
	}
	own := append([]teacher.Hint(nil), batch[0].hints...)
	out, tooLong := withSiblings(batch, h.Siblings, Rule{}, 1<<20)
	require.Zero(t, tooLong)
	require.Same(t, batch[1], out[1], "the success is left alone")
	require.NotSame(t, batch[0], out[0])
	require.NotEmpty(t, out[0].hints)
	for k, hint := range out[0].hints {
		require.Equal(t, batch[1].item.Rollout.ID, hint.Sibling)
		require.Equal(t, hint.Tokens, out[0].xr.Hints[k].Tokens, "what is scored is the sibling context")
		require.Greater(t, len(hint.Tokens), 0)
	}
	require.Greater(t, out[0].all, batch[0].all)
	require.Equal(t, own, batch[0].item.hints.Hints, "the item keeps the teacher's result")
	require.Equal(t, own, batch[0].hints)

	out, tooLong = withSiblings(batch, h.Siblings, Rule{}, len(batch[0].item.Rollout.Tokens)+200)
	require.Equal(t, 1, tooLong)
	require.Same(t, batch[0], out[0], "too long for the model: its own hints")
}
