package xla

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPickTruncation: the returned log-prob is that of the token under the
// tempered, top-k and top-p restricted, renormalised distribution (computed here
// independently), sampled tokens stay in the kept set, and their frequencies
// follow it.
func TestPickTruncation(t *testing.T) {
	logits := []float32{0.5, 2, -1, 1.5, 0, 2, -3}
	cases := []struct {
		name string
		o    SampleOptions
		keep []int // ids kept, most likely first
	}{
		{"all", SampleOptions{Temperature: 1}, []int{1, 5, 3, 0, 4, 2, 6}},
		{"tempered", SampleOptions{Temperature: 0.5}, []int{1, 5, 3, 0, 4, 2, 6}},
		{"top-k 3", SampleOptions{Temperature: 1, TopK: 3}, []int{1, 5, 3}},
		{"top-p 0.5", SampleOptions{Temperature: 1, TopP: 0.5}, []int{1, 5}},
		{"top-k 4, top-p 0.8", SampleOptions{Temperature: 0.7, TopK: 4, TopP: 0.8}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keep := tc.keep
			if keep == nil { // by hand: top 4 at T=0.7, then the nucleus of 0.8
				keep = nucleus(logits, []int{1, 5, 3, 0}, 0.7, 0.8)
			}
			var z float64
			for _, i := range keep {
				z += math.Exp(float64(logits[i]) / tc.o.Temperature)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			var sc pickScratch
			counts := map[int32]int{}
			const n = 20000
			for range n {
				tok, lp, policy := pick(logits, tc.o, rng, &sc)
				require.Contains(t, keep, int(tok))
				want := float64(logits[tok])/tc.o.Temperature - math.Log(z)
				require.InDelta(t, want, lp, 1e-12)
				require.InDelta(t, float64(logits[tok])-lse(logits), policy, 1e-12)
				counts[tok]++
			}
			for _, i := range keep {
				p := math.Exp(float64(logits[i])/tc.o.Temperature) / z
				require.InDelta(t, p, float64(counts[int32(i)])/n, 4*math.Sqrt(p*(1-p)/n)+1e-3, "token %d", i)
			}
		})
	}
}

// nucleus keeps, of the ids ranked (most likely first), the shortest prefix whose
// tempered probability renormalised over ranked reaches p.
func nucleus(logits []float32, ranked []int, temp, p float64) []int {
	var z float64
	for _, i := range ranked {
		z += math.Exp(float64(logits[i]) / temp)
	}
	var mass float64
	for j, i := range ranked {
		mass += math.Exp(float64(logits[i])/temp) / z
		if mass >= p {
			return ranked[:j+1]
		}
	}
	return ranked
}

func lse(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v))
	}
	return math.Log(s)
}

// TestPickGreedy: temperature 0 takes the first maximum with log-prob 0.
func TestPickGreedy(t *testing.T) {
	logits := []float32{0, 3, 1, 3}
	var sc pickScratch
	tok, lp, policy := pick(logits, SampleOptions{}, rand.New(rand.NewPCG(0, 0)), &sc)
	require.Equal(t, int32(1), tok)
	require.Zero(t, lp)
	require.InDelta(t, 3-lse(logits), policy, 1e-12)
}
