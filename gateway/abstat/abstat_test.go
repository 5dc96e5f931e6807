package abstat

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// goldens is testdata/goldens.json, written by testdata/gen_goldens.py (Python's
// standard library: statistics.NormalDist for z, the same SplitMix64 stream).
type goldens struct {
	Z []struct {
		C, Z float64
	}
	Wilson []struct {
		K, N int64
		C    float64
		Want [3]float64
	}
	Newcombe []struct {
		K1, N1, K2, N2 int64
		C              float64
		Want           [3]float64
	}
	BootMean []struct {
		Xs        []float64
		C         float64
		Resamples int
		Seed      uint64
		Want      [3]float64
	} `json:"boot_mean"`
	BootDiff []struct {
		A, B      []float64
		C         float64
		Resamples int
		Seed      uint64
		Want      [3]float64
	} `json:"boot_diff"`
	Unit []struct {
		Seed uint64
		ID   string
		Want float64
	}
}

func load(t *testing.T) goldens {
	b, err := os.ReadFile("testdata/goldens.json")
	require.NoError(t, err)
	var g goldens
	require.NoError(t, json.Unmarshal(b, &g))
	require.NotEmpty(t, g.Wilson)
	return g
}

func triple(i Interval) [3]float64 { return [3]float64{i.Est, i.Low, i.High} }

// TestAgainstReference compares every function with the Python reference's
// float64 values.
func TestAgainstReference(t *testing.T) {
	g := load(t)
	for _, c := range g.Z {
		require.InDelta(t, c.Z, Z(c.C), 1e-12, "z(%v)", c.C)
	}
	for _, c := range g.Wilson {
		require.InDeltaSlice(t, c.Want[:], func() []float64 { x := triple(Wilson(c.K, c.N, c.C)); return x[:] }(), 1e-12, "wilson %d/%d at %v", c.K, c.N, c.C)
	}
	for _, c := range g.Newcombe {
		got := triple(Newcombe(c.K1, c.N1, c.K2, c.N2, c.C))
		require.InDeltaSlice(t, c.Want[:], got[:], 1e-12, "newcombe %d/%d − %d/%d at %v", c.K1, c.N1, c.K2, c.N2, c.C)
	}
	for _, c := range g.BootMean {
		got := triple(BootstrapMean(c.Xs, c.C, c.Resamples, c.Seed))
		require.InDeltaSlice(t, c.Want[:], got[:], 1e-12, "bootstrap mean seed %d", c.Seed)
	}
	for _, c := range g.BootDiff {
		got := triple(BootstrapDiff(c.A, c.B, c.C, c.Resamples, c.Seed))
		require.InDeltaSlice(t, c.Want[:], got[:], 1e-12, "bootstrap diff seed %d", c.Seed)
	}
	for _, c := range g.Unit {
		require.Equal(t, c.Want, Unit(c.Seed, c.ID), "unit(%d, %q)", c.Seed, c.ID)
	}
}

// TestPublishedValues checks the 95% intervals against the values Newcombe
// published (Statistics in Medicine 17, 1998: Wilson score intervals, table I of
// "Two-sided confidence intervals for the single proportion"; method 10 of
// "Interval estimation for the difference between independent proportions",
// table II), to their four printed decimals.
func TestPublishedValues(t *testing.T) {
	for _, c := range []struct {
		k, n   int64
		lo, hi float64
	}{{81, 263, 0.2553, 0.3662}, {15, 148, 0.0624, 0.1605}, {0, 20, 0, 0.1611}, {1, 29, 0.0061, 0.1718}} {
		w := Wilson(c.k, c.n, 0.95)
		require.InDelta(t, c.lo, w.Low, 5e-5, "%d/%d", c.k, c.n)
		require.InDelta(t, c.hi, w.High, 5e-5, "%d/%d", c.k, c.n)
	}
	for _, c := range []struct {
		k1, n1, k2, n2 int64
		lo, hi         float64
	}{{56, 70, 48, 80, 0.0524, 0.3339}, {9, 10, 3, 10, 0.1705, 0.8090}, {6, 7, 2, 7, 0.0582, 0.8062},
		{5, 56, 0, 29, -0.0381, 0.1926}, {0, 10, 0, 20, -0.1611, 0.2775}, {0, 10, 0, 10, -0.2775, 0.2775}, {10, 10, 0, 20, 0.6791, 1}} {
		d := Newcombe(c.k1, c.n1, c.k2, c.n2, 0.95)
		require.InDelta(t, c.lo, d.Low, 5e-5, "%d/%d − %d/%d", c.k1, c.n1, c.k2, c.n2)
		require.InDelta(t, c.hi, d.High, 5e-5, "%d/%d − %d/%d", c.k1, c.n1, c.k2, c.n2)
	}
}

// TestBootstrapProperties: the same seed gives the same interval, the interval
// holds the estimate, and a constant sample has a zero-width interval.
func TestBootstrapProperties(t *testing.T) {
	xs := []float64{0, 1, 1, 0.5, 0.25, 1, 0}
	a := BootstrapMean(xs, 0.95, 1000, 9)
	require.Equal(t, a, BootstrapMean(xs, 0.95, 1000, 9))
	require.LessOrEqual(t, a.Low, a.Est)
	require.GreaterOrEqual(t, a.High, a.Est)
	require.Equal(t, Interval{2, 2, 2}, BootstrapMean([]float64{2, 2, 2}, 0.9, 100, 1))
	require.True(t, BootstrapDiff(nil, xs, 0.9, 10, 1).Est != BootstrapDiff(nil, xs, 0.9, 10, 1).Est, "no data: NaN")
}

// BenchmarkBootstrapDiff is the reward interval's cost per status refresh at
// 1,000 and 10,000 outcomes per arm (2,000 resamples), beside Newcombe's interval
// of the thumbs-up rates (its peer: what the thumbs_up metric costs).
func BenchmarkBootstrapDiff(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		a, c := make([]float64, n), make([]float64, n)
		for i := range a {
			a[i], c[i] = float64(i%3)/2, float64(i%5)/4
		}
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for range b.N {
				BootstrapDiff(a, c, 0.95, 2000, 1)
			}
		})
	}
	b.Run("newcombe", func(b *testing.B) {
		for range b.N {
			Newcombe(600, 1000, 550, 1000, 0.95)
		}
	})
}
