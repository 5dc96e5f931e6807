package viewer

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// Decoding says how token text was obtained.
const (
	DecodeModel = "model" // the tokenizer given to Build
	DecodeBytes = "bytes" // the byte tokenizer, from the file's bytes-v1 fingerprint
	DecodeIDs   = "ids"   // no tokenizer: the text of a token is its id
)

// Page is the data the page shows, embedded in it as JSON.
type Page struct {
	Files    []string  `json:"files"`
	Clip     float64   `json:"clip"` // |Δ| at or above which a hinted token counts as clipped
	Rollouts []Rollout `json:"rollouts"`
}

// Rollout is one credit row as the page shows it. Per-token slices have one
// entry per token; NaN is written as null.
type Rollout struct {
	File       string  `json:"file"`
	ID         string  `json:"id"`
	TaskID     string  `json:"task_id,omitempty"`
	Step       int64   `json:"step"`
	Reward     *Number `json:"reward"` // null when the row has none
	OutcomeAdv Number  `json:"outcome_advantage"`
	// Summaries for the list.
	SumAbsDelta  Number `json:"sum_abs_delta"` // Σ|Δ_t| over trained hinted tokens
	ClipFraction Number `json:"clip_fraction"` // share of trained hinted tokens with |Δ_t| ≥ Clip; 0 when none
	CreditMass   Number `json:"credit_mass"`   // Σ|A_t| over trained tokens
	Decoding     string `json:"decoding"`      // DecodeModel, DecodeBytes or DecodeIDs
	Tokenizer    string `json:"tokenizer,omitempty"`
	SchemaV2     bool   `json:"schema_v2"` // false: the per-token Δ, ρ, base and μ are absent (a v1 file)

	IDs      []int32              `json:"ids"`
	Text     []string             `json:"text"`
	Mask     []bool               `json:"mask"`
	Student  Numbers              `json:"s"`
	Teacher  Numbers              `json:"q"`
	Base     Numbers              `json:"base"`
	Delta    Numbers              `json:"delta"`
	Rho      Numbers              `json:"rho"`
	Sampler  Numbers              `json:"mu"`
	Adv      Numbers              `json:"a"`
	Segments []creditfile.Segment `json:"segments"`
	Hints    []Hint               `json:"hints"`
	// Teacher holds, per token, what the teacher of the first hint covering it
	// predicted there (credit schema v3); null outside hinted spans, and the whole
	// slice is null when no hint recorded it (v1 and v2 files).
	TeacherViews []*TeacherView `json:"teacher,omitempty"`
}

// Hint is a hint as the page shows it.
type Hint struct {
	Segment  int32  `json:"segment"`
	InsertAt int32  `json:"insert_at"`
	End      int32  `json:"end"`
	Source   string `json:"source"`
	Reason   string `json:"reason"`
	Text     string `json:"text"`
	Tokens   int    `json:"tokens"`
	// Schema v3: what the teacher saw and the loss the hint trained with; empty
	// (and JSDAlpha 0) where the file does not say.
	Context    string `json:"context,omitempty"`
	LossMode   string `json:"loss_mode,omitempty"`
	Divergence string `json:"divergence,omitempty"`
	JSDAlpha   Number `json:"jsd_alpha,omitempty"`
}

// TeacherView is the teacher's prediction at one hinted token: the probability it
// gave the sampled token and its most likely tokens (modes topk and full) with their
// probabilities, most likely first.
type TeacherView struct {
	Hint    int      `json:"hint"`    // index in Rollout.Hints
	Sampled Number   `json:"sampled"` // teacher probability of the sampled token
	IDs     []int32  `json:"ids"`
	Text    []string `json:"text"` // each id decoded alone (or the id, without a tokenizer)
	P       Numbers  `json:"p"`
}

// Number is a float32 that marshals NaN and ±Inf as null and otherwise in its
// shortest float32 form.
type Number float32

// MarshalJSON implements json.Marshaler.
func (n Number) MarshalJSON() ([]byte, error) { return appendNumber(nil, float32(n)), nil }

// Numbers is a []float32 marshalled as Number values.
type Numbers []float32

// MarshalJSON implements json.Marshaler; a nil slice is null.
func (v Numbers) MarshalJSON() ([]byte, error) {
	if v == nil {
		return []byte("null"), nil
	}
	b := make([]byte, 0, 8*len(v)+2)
	b = append(b, '[')
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendNumber(b, x)
	}
	return append(b, ']'), nil
}

func appendNumber(b []byte, x float32) []byte {
	if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, float64(x), 'g', -1, 32)
}

// Build returns the page for the rows of the credit files. tok decodes the tokens
// when not nil; else rows with the bytes-v1 fingerprint decode with the byte
// tokenizer and others show token ids. clip is the credit gate's clip c.
func Build(files []string, rows [][]creditfile.Row, tok tokenizer.Tokenizer, clip float64) (*Page, error) {
	if len(files) != len(rows) {
		return nil, fmt.Errorf("build page: %d files, %d row sets", len(files), len(rows))
	}
	p := &Page{Files: files, Clip: clip, Rollouts: []Rollout{}}
	bytesTok := tokenizer.NewBytes()
	for f, rs := range rows {
		for i := range rs {
			r, err := rollout(files[f], &rs[i], tok, bytesTok, clip)
			if err != nil {
				return nil, fmt.Errorf("build page: %s row %d: %w", files[f], i, err)
			}
			p.Rollouts = append(p.Rollouts, r)
		}
	}
	return p, nil
}

func rollout(file string, r *creditfile.Row, tok, bytesTok tokenizer.Tokenizer, clip float64) (Rollout, error) {
	out := Rollout{File: file, ID: r.RolloutID, TaskID: r.TaskID, Step: r.Step, OutcomeAdv: Number(r.OutcomeAdv),
		Tokenizer: r.Tokenizer, SchemaV2: r.Delta != nil, IDs: r.Tokens, Mask: r.LossMask,
		Student: r.Student, Teacher: r.Teacher, Base: r.Base, Delta: r.Delta, Rho: r.Rho, Sampler: r.Sampler,
		Adv: r.Advantages, Segments: r.Segments, Hints: []Hint{}}
	if out.Segments == nil {
		out.Segments = []creditfile.Segment{}
	}
	if r.HasReward {
		rw := Number(r.Reward)
		out.Reward = &rw
	}
	dec := tok
	out.Decoding = DecodeModel
	if dec == nil && r.Tokenizer == tokenizer.BytesFingerprint {
		dec, out.Decoding = bytesTok, DecodeBytes
	}
	text, err := tokenTexts(dec, r.Tokens)
	if err != nil {
		return Rollout{}, err
	}
	if dec == nil {
		out.Decoding = DecodeIDs
	}
	out.Text = text
	var sumAbs, mass float64
	var hinted, clipped int
	for t := range r.Tokens {
		if !r.LossMask[t] {
			continue
		}
		mass += math.Abs(float64(r.Advantages[t]))
		if r.Delta == nil || math.IsNaN(float64(r.Delta[t])) {
			continue
		}
		d := math.Abs(float64(r.Delta[t]))
		sumAbs += d
		hinted++
		if d >= clip {
			clipped++
		}
	}
	out.SumAbsDelta, out.CreditMass = Number(sumAbs), Number(mass)
	if hinted > 0 {
		out.ClipFraction = Number(float64(clipped) / float64(hinted))
	}
	for _, h := range r.Hints {
		out.Hints = append(out.Hints, Hint{Segment: h.Segment, InsertAt: h.InsertAt, End: h.End, Source: h.Source,
			Reason: h.Reason, Text: h.Text, Tokens: len(h.Tokens), Context: h.Context, LossMode: h.LossMode,
			Divergence: h.Divergence, JSDAlpha: Number(h.JSDAlpha)})
	}
	tv, err := teacherViews(r, dec)
	if err != nil {
		return Rollout{}, err
	}
	out.TeacherViews = tv
	return out, nil
}

// teacherViews returns the per-token TeacherView of r's v3 hints (the first hint
// covering a token wins, as in the distillation loss), or nil when no hint recorded
// the teacher's log-probs. dec decodes the alternatives; nil shows their ids.
func teacherViews(r *creditfile.Row, dec tokenizer.Tokenizer) ([]*TeacherView, error) {
	var out []*TeacherView
	for k, h := range r.Hints {
		if h.TeacherLogProbs == nil {
			continue
		}
		if out == nil {
			out = make([]*TeacherView, len(r.Tokens))
		}
		for i, q := range h.TeacherLogProbs {
			t := int(h.InsertAt) + i
			if t < 0 || t >= len(out) || out[t] != nil {
				continue
			}
			v := &TeacherView{Hint: k, Sampled: Number(math.Exp(float64(q))), IDs: []int32{}, Text: []string{}, P: Numbers{}}
			if i < len(h.TopIDs) {
				v.IDs = h.TopIDs[i]
				for j, id := range h.TopIDs[i] {
					text, err := tokenTexts(dec, []int32{id})
					if err != nil {
						return nil, fmt.Errorf("hint %d, position %d: teacher alternative %d: %w", k, t, id, err)
					}
					v.Text = append(v.Text, text[0])
					v.P = append(v.P, float32(math.Exp(float64(h.TopLogProbs[i][j]))))
				}
			}
			out[t] = v
		}
	}
	return out, nil
}

// tokenTexts returns the text of each token: dec's decoding of it alone, or its
// id when dec is nil. A token that is part of a character (a byte of a multi-byte
// UTF-8 sequence, as byte and byte-level BPE tokenizers make) decodes alone to
// U+FFFD: the shortest run of up to four tokens that decodes without U+FFFD is
// decoded together, shown on the run's first token with the others empty, rather
// than one U+FFFD per byte. (A U+FFFD in the text itself stays one per byte.)
func tokenTexts(dec tokenizer.Tokenizer, ids []int32) ([]string, error) {
	out := make([]string, len(ids))
	for t := range ids {
		if dec == nil {
			out[t] = strconv.Itoa(int(ids[t])) + " "
			continue
		}
		s, err := dec.Decode(ids[t : t+1])
		if err != nil {
			return nil, fmt.Errorf("decode token %d: %w", t, err)
		}
		out[t] = s
	}
	if dec == nil {
		return out, nil
	}
	const bad = "\uFFFD"
	for t := 0; t < len(ids); t++ {
		if !strings.Contains(out[t], bad) {
			continue
		}
		for k := 2; k <= utf8.UTFMax && t+k <= len(ids); k++ {
			run, err := dec.Decode(ids[t : t+k])
			if err != nil {
				break
			}
			if !strings.Contains(run, bad) {
				out[t] = run
				for j := t + 1; j < t+k; j++ {
					out[j] = ""
				}
				t += k - 1
				break
			}
		}
	}
	return out, nil
}
