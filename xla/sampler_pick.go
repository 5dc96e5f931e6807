package xla

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
)

// pickScratch is reused across pick calls so a decode step allocates nothing per
// row.
type pickScratch struct {
	// After a pick, idx and z - norm are the sampled distribution's candidates and
	// their log-probs (sorted, most likely first, when sorted says so).
	idx    []int32
	z      []float64
	norm   float64
	sorted bool
	adj    []float32 // adjusted logits (adjust)
}

// pick samples a token from one row of logits under o with rng and returns it with
// lp, its log-prob under the distribution sampled from (softmax(logits/T) restricted
// to the top-k, then to the top-p nucleus, then to min-p, renormalised; 0 when
// greedy), and
// policy, its log-prob at temperature 1 without truncation (log-softmax in float64).
// Greedy (temperature 0 or top-k 1) takes the first maximum.
func pick(logits []float32, o SampleOptions, rng *rand.Rand, sc *pickScratch) (tok int32, lp, policy float64) {
	best := 0
	for i, x := range logits {
		if x > logits[best] {
			best = i
		}
	}
	lse := logSumExp(logits, 1, float64(logits[best]))
	if o.Temperature == 0 || o.TopK == 1 {
		sc.idx, sc.z, sc.norm, sc.sorted = append(sc.idx[:0], int32(best)), append(sc.z[:0], 0), 0, true
		return int32(best), 0, float64(logits[best]) - lse
	}
	// Candidates in the order their probability mass is accumulated: all tokens in
	// id order, or, with truncation, by descending logit (ties by id).
	sc.idx = sc.idx[:0]
	for i := range logits {
		sc.idx = append(sc.idx, int32(i))
	}
	truncate := (o.TopK > 0 && o.TopK < len(logits)) || (o.TopP > 0 && o.TopP < 1) || o.MinP > 0
	sc.sorted = truncate
	if truncate {
		slices.SortFunc(sc.idx, func(a, b int32) int {
			if c := cmp.Compare(logits[b], logits[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		if o.TopK > 0 && o.TopK < len(sc.idx) {
			sc.idx = sc.idx[:o.TopK]
		}
	}
	// z = logits/T − logsumexp over the candidates: log-probs of the tempered,
	// top-k-restricted distribution.
	inv, top := 1/o.Temperature, float64(logits[best])/o.Temperature
	sc.z = sc.z[:0]
	var sum float64
	for _, i := range sc.idx {
		z := float64(logits[i]) * inv
		sc.z = append(sc.z, z)
		sum += math.Exp(z - top)
	}
	norm := top + math.Log(sum)
	if o.TopP > 0 && o.TopP < 1 { // the shortest prefix whose mass reaches TopP
		var mass, kept float64
		n := len(sc.z)
		for j, z := range sc.z {
			mass += math.Exp(z - norm)
			kept += math.Exp(z - top)
			if mass >= o.TopP {
				n = j + 1
				break
			}
		}
		if n < len(sc.z) {
			sc.idx, sc.z = sc.idx[:n], sc.z[:n]
			norm = top + math.Log(kept)
		}
	}
	if o.MinP > 0 { // drop what is below min_p × the most likely's probability
		cut := top + math.Log(o.MinP)
		n := len(sc.z)
		for n > 1 && sc.z[n-1] < cut {
			n--
		}
		if n < len(sc.z) {
			var kept float64
			for _, z := range sc.z[:n] {
				kept += math.Exp(z - top)
			}
			sc.idx, sc.z = sc.idx[:n], sc.z[:n]
			norm = top + math.Log(kept)
		}
	}
	sc.norm = norm
	u := rng.Float64()
	var acc float64
	j := len(sc.z) - 1 // rounding: the last candidate takes the remainder
	for k, z := range sc.z {
		acc += math.Exp(z - norm)
		if u < acc {
			j = k
			break
		}
	}
	tok = sc.idx[j]
	return tok, sc.z[j] - norm, float64(logits[tok]) - lse
}

// logSumExp is log Σ exp(x_i · scale), shifted by top (the largest x_i · scale).
func logSumExp(x []float32, scale, top float64) float64 {
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v)*scale - top)
	}
	return top + math.Log(s)
}

// top returns the n most likely candidates of the last pick's distribution, most
// likely first.
func (sc *pickScratch) top(n int) []TokenLogProb {
	order := make([]int, len(sc.idx))
	for i := range order {
		order[i] = i
	}
	if !sc.sorted {
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sc.z[b], sc.z[a]) })
	}
	out := make([]TokenLogProb, 0, min(n, len(order)))
	for _, i := range order[:min(n, len(order))] {
		out = append(out, TokenLogProb{Token: sc.idx[i], LogProb: float32(sc.z[i] - sc.norm)})
	}
	return out
}

// history is what a row has seen, for the penalties: which tokens its prompt
// holds and how often each was sampled.
type history struct {
	prompt  map[int32]bool
	sampled map[int32]int
}

// newHistory returns the history of a row with prompt, or nil when o has no
// penalty.
func newHistory(prompt []int32, o SampleOptions) *history {
	rp := o.RepetitionPenalty != 0 && o.RepetitionPenalty != 1
	if !rp && o.PresencePenalty == 0 && o.FrequencyPenalty == 0 {
		return nil
	}
	h := &history{sampled: map[int32]int{}}
	if rp {
		h.prompt = map[int32]bool{}
		for _, t := range prompt {
			h.prompt[t] = true
		}
	}
	return h
}

// add notes a sampled token.
func (h *history) add(tok int32) {
	if h != nil {
		h.sampled[tok]++
	}
}

// adjust returns logits with o's logit bias and h's penalties applied (in sc.adj),
// or logits itself when there are none: the bias first, then the repetition
// penalty over the prompt's and the sampled tokens, then presence and frequency
// over the sampled ones.
func adjust(logits []float32, o SampleOptions, h *history, sc *pickScratch) []float32 {
	if len(o.LogitBias) == 0 && h == nil {
		return logits
	}
	sc.adj = append(sc.adj[:0], logits...)
	a := sc.adj
	for id, b := range o.LogitBias {
		if id >= 0 && int(id) < len(a) {
			a[id] += b
		}
	}
	if h == nil {
		return a
	}
	if rp := float32(o.RepetitionPenalty); rp != 0 && rp != 1 {
		penalise := func(t int32) {
			if a[t] > 0 {
				a[t] /= rp
			} else {
				a[t] *= rp
			}
		}
		for t := range h.prompt {
			penalise(t)
		}
		for t := range h.sampled {
			if !h.prompt[t] {
				penalise(t)
			}
		}
	}
	for t, n := range h.sampled {
		a[t] -= float32(o.PresencePenalty + o.FrequencyPenalty*float64(n))
	}
	return a
}
