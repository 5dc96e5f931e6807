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
	idx []int32
	z   []float64
}

// pick samples a token from one row of logits under o with rng and returns it with
// lp, its log-prob under the distribution sampled from (softmax(logits/T) restricted
// to the top-k, then to the top-p nucleus, renormalised; 0 when greedy), and
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
		return int32(best), 0, float64(logits[best]) - lse
	}
	// Candidates in the order their probability mass is accumulated: all tokens in
	// id order, or, with truncation, by descending logit (ties by id).
	sc.idx = sc.idx[:0]
	for i := range logits {
		sc.idx = append(sc.idx, int32(i))
	}
	truncate := (o.TopK > 0 && o.TopK < len(logits)) || (o.TopP > 0 && o.TopP < 1)
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
