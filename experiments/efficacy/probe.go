package efficacy

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/train"
	"github.com/hindsight-ai/hindsight/xla"
)

// ProbeResult is what one hint setup's hints do to the warm start's log-probs on a
// fixed set of sampled rollouts, before any training: Δ = q(h) − s (base student)
// and q(h) − q(∅) (base empty_hint) over the scored tokens of right and of wrong
// actions (Verdict).
type ProbeResult struct {
	Setup     HintSetup  `json:"setup"`
	Rollouts  int        `json:"rollouts"`
	Hints     HintStats  `json:"hints"`
	Student   DeltaSplit `json:"student"`    // Δ = q(h) − s
	EmptyHint DeltaSplit `json:"empty_hint"` // Δ = q(h) − q(∅)
}

// String is one line per base: mean Δ on right and wrong actions with their token counts.
func (p ProbeResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rules %s, place %s: %d rollouts, %d hints (no hint %d, answer leaks %d, guard leaks %d, no retry %d)\n",
		p.Setup.Rules, p.Setup.Place, p.Rollouts, p.Hints.Hints, p.Hints.NoHint, p.Hints.AnswerLeaks, p.Hints.GuardLeaks, p.Hints.NoRetry)
	for _, x := range []struct {
		name string
		d    DeltaSplit
	}{{"student", p.Student}, {"empty_hint", p.EmptyHint}} {
		fmt.Fprintf(&b, "  base %-10s Δ right %+.3f (%d tokens)  Δ wrong %+.3f (%d tokens)  right − wrong %+.3f  mean |Δ| %.3f\n",
			x.name, x.d.Right(), x.d.NRight, x.d.Wrong(), x.d.NWrong, x.d.Right()-x.d.Wrong(), x.d.AbsMean())
	}
	return b.String()
}

// Probe samples tasks × group rollouts of train tasks from the model at dir (at
// temperature temp, seed seed) once, then for each setup hints them and scores the
// hinted ranges: how each setup's hints move the model's log-probs of right and of
// wrong actions. It trains nothing: analysis of the warm start, to choose a hint
// setup before any arm runs.
func Probe(ctx context.Context, backend backends.Backend, dir string, w World, tasks, group int, temp float64, seed int64, setups []HintSetup) ([]ProbeResult, error) {
	p, err := OpenPolicy(backend, dir)
	if err != nil {
		return nil, err
	}
	sc, err := xla.NewScorer(backend, p.Model, xla.ScorerOptions{})
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	c := Config{TasksPerStep: tasks}
	ts, err := c.Tasks(seed, 0)
	if err != nil {
		return nil, err
	}
	envs, err := collect.Episodes(ctx, p.Sampler, p.Tok, ts, w.Episodes(group, temp, SampleSeed(seed, 0)))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	out := make([]ProbeResult, len(setups))
	hinters := make([]*Hinter, len(setups))
	for k, s := range setups {
		if hinters[k], err = NewHinterWith(p.Tok, s); err != nil {
			return nil, err
		}
		out[k] = ProbeResult{Setup: s, Rollouts: len(envs)}
	}
	for i, e := range envs {
		ro := e.Rollout(fmt.Sprintf("probe-%04d", i))
		mask := train.Rule{}.Mask(ro)
		s, cache, err := sc.Score(ctx, ro.Tokens)
		if err != nil {
			return nil, fmt.Errorf("probe: %w", err)
		}
		for k, h := range hinters {
			hints, err := h.Hints(ctx, ro, e.Task())
			if err == nil && len(hints) > 0 {
				err = probeHints(ctx, sc, cache, ro.Tokens, s, hints, func(t int) bool { return mask[t] },
					func(q, qe map[int]float64) {
						out[k].Student.Add(ro, lookup(q, s, nil))
						out[k].EmptyHint.Add(ro, lookup(q, nil, qe))
					})
			}
			if err != nil {
				cache.Close()
				return nil, fmt.Errorf("probe %s: %w", ro.ID, err)
			}
		}
		cache.Close()
	}
	for k, h := range hinters {
		out[k].Hints = h.Stats
	}
	return out, nil
}

// probeHints scores each hint's range with the hint and with the empty template and
// hands the per-token q(h) and q(∅) of trainable positions to got.
func probeHints(ctx context.Context, sc *xla.Scorer, cache *xla.KVCache, tokens []int32, s []float32, hints []teacher.Hint,
	trainable func(int) bool, got func(q, qe map[int]float64)) error {
	var segs []credit.Hint
	for _, h := range hints {
		segs = append(segs, credit.Hint{InsertAt: int(h.InsertAt), End: int(h.End), Tokens: h.Tokens})
		segs = append(segs, credit.Hint{InsertAt: int(h.InsertAt), End: int(h.End), Tokens: h.Empty})
	}
	qs, err := sc.ScoreHinted(ctx, tokens, cache, segs)
	if err != nil {
		return err
	}
	q, qe := map[int]float64{}, map[int]float64{}
	for j, seg := range segs {
		for t := seg.InsertAt; t < seg.End; t++ {
			if !trainable(t) {
				continue
			}
			if j%2 == 0 {
				q[t] = float64(qs[j][t-seg.InsertAt])
			} else {
				qe[t] = float64(qs[j][t-seg.InsertAt])
			}
		}
	}
	got(q, qe)
	return nil
}

// lookup returns Δ_t = q_t − base_t for positions in q: base s (student) or qe.
func lookup(q map[int]float64, s []float32, qe map[int]float64) func(int) (float64, bool) {
	return func(t int) (float64, bool) {
		v, ok := q[t]
		if !ok {
			return 0, false
		}
		var b float64
		if s != nil {
			b = float64(s[t])
		} else if b, ok = qe[t]; !ok {
			return 0, false
		}
		if math.IsNaN(v) || math.IsNaN(b) {
			return 0, false
		}
		return v - b, true
	}
}

// ProbeSetups are the setups the probe compares: both rules at both places.
// (Each reports both bases, so Base is left at the student base.)
var ProbeSetups = []HintSetup{
	{Rules: RulesGeneric, Place: PlaceFailed, Base: credit.BaseStudent}, {Rules: RulesWorld, Place: PlaceFailed, Base: credit.BaseStudent},
	{Rules: RulesGeneric, Place: PlaceRetry, Base: credit.BaseStudent}, {Rules: RulesWorld, Place: PlaceRetry, Base: credit.BaseStudent},
}
