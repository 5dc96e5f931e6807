// Package abstat is the A/B test's statistics (docs/gateway.md "Which checkpoint
// do people prefer"): Wilson score intervals for a thumbs-up rate, Newcombe's
// hybrid score interval for the difference of two rates, and a seeded percentile
// bootstrap for the mean outcome of each arm and their difference. Pure float64,
// no dependencies; testdata/gen_goldens.py is the independent reference
// (Python's statistics.NormalDist and the same splitmix64 stream).
package abstat

import (
	"math"
	"slices"
)

// Z is the two-sided normal quantile of confidence c (0 < c < 1): P(|N(0,1)| ≤ Z) = c.
func Z(c float64) float64 { return math.Sqrt2 * math.Erfinv(c) }

// Interval is an estimate with its confidence bounds.
type Interval struct {
	Est, Low, High float64
}

// Wilson returns the rate k/n with its Wilson score interval at confidence c
// (two-sided). n = 0 gives the whole [0, 1] around 0.
func Wilson(k, n int64, c float64) Interval {
	if n <= 0 {
		return Interval{0, 0, 1}
	}
	z := Z(c)
	nf := float64(n)
	p := float64(k) / nf
	z2 := z * z
	den := 1 + z2/nf
	mid := (p + z2/(2*nf)) / den
	half := z / den * math.Sqrt(p*(1-p)/nf+z2/(4*nf*nf))
	return Interval{p, max(0, mid-half), min(1, mid+half)}
}

// Newcombe returns the difference of two rates, k1/n1 − k2/n2, with Newcombe's
// hybrid score interval (1998, method 10) from the two Wilson intervals at
// confidence c. An arm with n = 0 gives the whole [−1, 1].
func Newcombe(k1, n1, k2, n2 int64, c float64) Interval {
	if n1 <= 0 || n2 <= 0 {
		return Interval{0, -1, 1}
	}
	a, b := Wilson(k1, n1, c), Wilson(k2, n2, c)
	d := a.Est - b.Est
	lo := d - math.Sqrt((a.Est-a.Low)*(a.Est-a.Low)+(b.High-b.Est)*(b.High-b.Est))
	hi := d + math.Sqrt((a.High-a.Est)*(a.High-a.Est)+(b.Est-b.Low)*(b.Est-b.Low))
	return Interval{d, max(-1, lo), min(1, hi)}
}

// splitmix64 is the bootstrap's random stream (Vigna's SplitMix64): tiny, and the
// same in the Python reference, so the resamples are reproducible from a seed.
type splitmix64 struct{ s uint64 }

func (r *splitmix64) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// resampleMean is the mean of len(xs) draws from xs with replacement.
func resampleMean(xs []float64, r *splitmix64) float64 {
	n := uint64(len(xs))
	s := 0.0
	for range xs {
		s += xs[r.next()%n]
	}
	return s / float64(n)
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// percentile returns the (1−c)/2 and (1+c)/2 order statistics of stats (sorted in
// place): indices ⌊αB⌋ and ⌈(1−α)B⌉−1.
func percentile(stats []float64, c float64) (float64, float64) {
	slices.Sort(stats)
	b := len(stats)
	alpha := (1 - c) / 2
	lo := int(math.Floor(alpha * float64(b)))
	hi := int(math.Ceil((1-alpha)*float64(b))) - 1
	lo, hi = min(max(lo, 0), b-1), min(max(hi, 0), b-1)
	return stats[lo], stats[hi]
}

// BootstrapMean returns the mean of xs with its percentile bootstrap interval at
// confidence c from resamples resamples drawn with the stream seeded by seed. No
// data gives NaN bounds.
func BootstrapMean(xs []float64, c float64, resamples int, seed uint64) Interval {
	if len(xs) == 0 || resamples <= 0 {
		return Interval{math.NaN(), math.NaN(), math.NaN()}
	}
	r := &splitmix64{seed}
	stats := make([]float64, resamples)
	for i := range stats {
		stats[i] = resampleMean(xs, r)
	}
	lo, hi := percentile(stats, c)
	return Interval{mean(xs), lo, hi}
}

// BootstrapDiff returns mean(a) − mean(b) with its percentile bootstrap interval:
// each resample draws a, then b, from the one stream seeded by seed.
func BootstrapDiff(a, b []float64, c float64, resamples int, seed uint64) Interval {
	if len(a) == 0 || len(b) == 0 || resamples <= 0 {
		return Interval{math.NaN(), math.NaN(), math.NaN()}
	}
	r := &splitmix64{seed}
	stats := make([]float64, resamples)
	for i := range stats {
		ma := resampleMean(a, r)
		stats[i] = ma - resampleMean(b, r)
	}
	lo, hi := percentile(stats, c)
	return Interval{mean(a) - mean(b), lo, hi}
}

// Unit maps (seed, id) to a number in [0, 1) that is the same on every run: the
// first 53 bits of FNV-1a 64 over seed's 8 little-endian bytes and then id. A
// session goes to the candidate when Unit(seed, id) < share.
func Unit(seed uint64, id string) float64 {
	const offset, prime = 0xcbf29ce484222325, 0x100000001b3
	h := uint64(offset)
	for i := range 8 {
		h ^= (seed >> (8 * i)) & 0xff
		h *= prime
	}
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= prime
	}
	return float64(h>>11) / (1 << 53)
}
