package credit

import (
	"math"
	"sort"
)

// Stats are the numbers people watch for one step (docs/design.md: the two advantages live
// on different scales and are reported separately).
type Stats struct {
	Rollouts   int
	Tokens     int // trainable tokens of the rollouts not skipped
	HintTokens int // trainable tokens inside at least one hint span
	// |Δ| over hint tokens, nats.
	DeltaAbsMean, DeltaAbsP50, DeltaAbsP90, DeltaAbsP99, DeltaAbsMax float64
	// ClipFraction is the share of hint tokens with |Δ| > c (clipped, or squashed hard
	// by tanh).
	ClipFraction float64
	// TopShare is the share of Σ|Δ| held by the top 1% of hint tokens (at least one):
	// near 1 means a few pivot tokens carry the whole hint signal.
	TopShare float64
	// Importance weights over trainable tokens.
	RhoP50, RhoP90, RhoP99, RhoMin, RhoMax float64
	// RhoTruncated is the share of trainable tokens whose weight hit ρ_max.
	RhoTruncated float64
	// Advantages: mean |A_hint| over hint tokens (nats), mean A_out and mean |A_out|
	// over rollouts with a reward (reward units).
	AHintAbsMean, AOutMean, AOutAbsMean float64
	// NoSampler counts rollouts without sampler log-probs; Skipped those left out.
	NoSampler, Skipped int
	// The two loss terms kept apart (docs/distillation.md "Two terms kept apart": neither may silently swamp the other).
	// OutTokens and DistillTokens are their token counts (the denominators under
	// normalize: separate): trainable tokens of rollouts with a reward, and trainable
	// tokens inside a teacher span. OutWeightAbs is Σ_t |outcome part of Weight_t| and
	// DistillWeightAbs Σ_t |hint part of Weight_t| (sampled_token) or Σ_t
	// DistillWeight_t (topk, full): each term's gradient is a sum of per-token
	// gradients of log π (or of D_t) with these coefficients, so their ratio is the
	// terms' relative pull on the step. The values of the terms need the policy's
	// log-probs: LossTerms.
	OutTokens, DistillTokens       int
	OutWeightAbs, DistillWeightAbs float64
	// DistillISMean is the mean importance weight on the divergence term over the
	// positions it covers (Result.DistillIS; modes topk and full, else 0), and
	// DistillISCapped the share of them at distill.is_cap.
	DistillISMean, DistillISCapped float64
}

func summarize(cfg Config, rs []Sequence, res []Result, nm norms) Stats {
	s := Stats{Rollouts: len(rs), OutTokens: nm.nOut, DistillTokens: nm.nDistill}
	for i := range res {
		for t, w := range res[i].Weight {
			wo := valueOr(res[i].WeightOut, t)
			s.OutWeightAbs += math.Abs(wo)
			s.DistillWeightAbs += math.Abs(w-wo) + math.Abs(valueOr(res[i].DistillWeight, t))
		}
	}
	var nIS int
	for i := range res {
		for t, w := range res[i].DistillWeight {
			if w == 0 {
				continue
			}
			is := res[i].DistillIS[t]
			s.DistillISMean += is
			if c := cfg.Distill.ISCap; c > 0 && is >= c {
				s.DistillISCapped++
			}
			nIS++
		}
	}
	if nIS > 0 {
		s.DistillISMean /= float64(nIS)
		s.DistillISCapped /= float64(nIS)
	}
	var deltas, rhos []float64
	var sumAH float64
	var nOut int
	for i := range res {
		r, c := &rs[i], &res[i]
		if c.NoSampler {
			s.NoSampler++
		}
		if c.Skipped {
			s.Skipped++
			continue
		}
		if r.HasReward {
			s.AOutMean += c.AOut
			s.AOutAbsMean += math.Abs(c.AOut)
			nOut++
		}
		for t, m := range r.Trainable {
			if !m {
				continue
			}
			s.Tokens++
			rhos = append(rhos, c.Rho[t])
			if c.Rho[t] >= cfg.RhoMax {
				s.RhoTruncated++
			}
			if !math.IsNaN(c.Delta[t]) {
				d := math.Abs(c.Delta[t])
				deltas = append(deltas, d)
				sumAH += math.Abs(c.AHint[t])
				if d > cfg.Clip {
					s.ClipFraction++
				}
			}
		}
	}
	if nOut > 0 {
		s.AOutMean /= float64(nOut)
		s.AOutAbsMean /= float64(nOut)
	}
	if s.Tokens > 0 {
		s.RhoTruncated /= float64(s.Tokens)
		sort.Float64s(rhos)
		s.RhoMin, s.RhoMax = rhos[0], rhos[len(rhos)-1]
		s.RhoP50, s.RhoP90, s.RhoP99 = percentile(rhos, 50), percentile(rhos, 90), percentile(rhos, 99)
	}
	s.HintTokens = len(deltas)
	if n := len(deltas); n > 0 {
		s.ClipFraction /= float64(n)
		s.AHintAbsMean = sumAH / float64(n)
		sort.Float64s(deltas)
		var sum float64
		for _, d := range deltas {
			sum += d
		}
		s.DeltaAbsMean = sum / float64(n)
		s.DeltaAbsMax = deltas[n-1]
		s.DeltaAbsP50, s.DeltaAbsP90, s.DeltaAbsP99 = percentile(deltas, 50), percentile(deltas, 90), percentile(deltas, 99)
		top := max(1, n/100)
		var topSum float64
		for _, d := range deltas[n-top:] {
			topSum += d
		}
		if sum > 0 {
			s.TopShare = topSum / sum
		}
	}
	return s
}

func valueOr(v []float64, t int) float64 {
	if t < len(v) {
		return v[t]
	}
	return 0
}

// percentile is the nearest-rank percentile of sorted xs.
func percentile(sorted []float64, p float64) float64 {
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(k, len(sorted)-1))]
}
