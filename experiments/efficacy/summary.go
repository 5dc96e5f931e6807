package efficacy

import (
	"fmt"
	"math"
	"sort"
)

// Point is one held-out eval of one run: after Rollouts rollouts consumed and
// CPUSeconds of CPU time, Success of the held-out tasks were solved.
type Point struct {
	Rollouts   int     `json:"rollouts"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Success    float64 `json:"success"`
}

// Curve is one run: one arm, one seed. Points are in training order, the first the
// warm start (0 rollouts).
type Curve struct {
	Arm    string  `json:"arm"`
	Seed   int64   `json:"seed"`
	LR     float64 `json:"lr"`
	Points []Point `json:"points"`
}

// Stats are the mean, standard deviation (n−1), minimum and maximum of values.
type Stats struct {
	Mean float64 `json:"mean"`
	Std  float64 `json:"std"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
	N    int     `json:"n"`
}

// NewStats summarises xs; NaNs are left out.
func NewStats(xs []float64) Stats {
	s := Stats{Min: math.Inf(1), Max: math.Inf(-1)}
	var sum float64
	for _, x := range xs {
		if math.IsNaN(x) {
			continue
		}
		s.N++
		sum += x
		s.Min, s.Max = min(s.Min, x), max(s.Max, x)
	}
	if s.N == 0 {
		return Stats{Mean: math.NaN(), Std: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	s.Mean = sum / float64(s.N)
	if s.N > 1 {
		var ss float64
		for _, x := range xs {
			if !math.IsNaN(x) {
				ss += (x - s.Mean) * (x - s.Mean)
			}
		}
		s.Std = math.Sqrt(ss / float64(s.N-1))
	}
	return s
}

// Crossing returns the x (rollouts, or CPU-seconds with byCPU) at which the curve first
// reaches thr, linearly interpolated between the two evals around it; ok is false if it
// never does.
func Crossing(pts []Point, thr float64, byCPU bool) (x float64, ok bool) {
	xOf := func(p Point) float64 {
		if byCPU {
			return p.CPUSeconds
		}
		return float64(p.Rollouts)
	}
	for i, p := range pts {
		if p.Success < thr {
			continue
		}
		if i == 0 {
			return xOf(p), true
		}
		q := pts[i-1]
		f := (thr - q.Success) / (p.Success - q.Success)
		return xOf(q) + f*(xOf(p)-xOf(q)), true
	}
	return 0, false
}

// Arm sums up the seeds of one arm.
type Arm struct {
	Name  string  `json:"name"`
	Seeds []int64 `json:"seeds"`
	// Final is the held-out success of the last eval over seeds; Gain is Final less
	// the warm start, per seed.
	Final Stats `json:"final"`
	Gain  Stats `json:"gain"`
	// ToThreshold is rollouts-to-threshold per seed (NaN: never reached), and CPU-seconds.
	ToThreshold    []float64 `json:"rollouts_to_threshold"`
	CPUToThreshold []float64 `json:"cpu_seconds_to_threshold"`
	Reached        int       `json:"reached"`
}

// Summary is the experiment's answer.
type Summary struct {
	WarmStart float64 `json:"warm_start_success"`
	// Threshold is the warm start plus half the outcome-only arm's mean final gain.
	Threshold float64 `json:"threshold"`
	Arms      []Arm   `json:"arms"`
	// Ratio is rollouts-to-threshold of outcome-only over hint credit, per seed (paired
	// by seed; a seed where either arm never reached the threshold is left out) and its
	// statistics; RatioOfMeans divides the arms' mean rollouts-to-threshold.
	Ratio        Stats     `json:"ratio"`
	RatioSeeds   []float64 `json:"ratio_per_seed"`
	RatioOfMeans float64   `json:"ratio_of_means"`
	CPURatio     Stats     `json:"cpu_ratio"`
	// NoRatio says why no ratio is reported (outcome-only gained < MinGain).
	NoRatio string `json:"no_ratio,omitempty"`
}

// MinGain is the least final gain of the outcome-only arm (2 points) for which a ratio
// means something.
const MinGain = 0.02

// Summarize computes the Summary of curves; base and hint name the outcome-only and the
// hint-credit arms. Every curve starts at the same warm start (its first point).
func Summarize(curves []Curve, base, hint string) (Summary, error) {
	byArm := map[string][]Curve{}
	var names []string
	for _, c := range curves {
		if len(c.Points) < 2 {
			return Summary{}, fmt.Errorf("arm %s seed %d: %d evals, need the warm start and at least one more", c.Arm, c.Seed, len(c.Points))
		}
		if _, ok := byArm[c.Arm]; !ok {
			names = append(names, c.Arm)
		}
		byArm[c.Arm] = append(byArm[c.Arm], c)
	}
	if byArm[base] == nil || byArm[hint] == nil {
		return Summary{}, fmt.Errorf("summarize: need arms %q and %q, have %v", base, hint, names)
	}
	var warm []float64
	for _, c := range curves {
		warm = append(warm, c.Points[0].Success)
	}
	s := Summary{WarmStart: NewStats(warm).Mean}
	gain := func(cs []Curve) []float64 {
		var g []float64
		for _, c := range cs {
			g = append(g, c.Points[len(c.Points)-1].Success-c.Points[0].Success)
		}
		return g
	}
	baseGain := NewStats(gain(byArm[base])).Mean
	s.Threshold = s.WarmStart + 0.5*baseGain
	arms := map[string]*Arm{}
	for _, n := range names {
		cs := byArm[n]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Seed < cs[j].Seed })
		a := Arm{Name: n}
		var final []float64
		for _, c := range cs {
			a.Seeds = append(a.Seeds, c.Seed)
			final = append(final, c.Points[len(c.Points)-1].Success)
			x, ok := Crossing(c.Points, s.Threshold, false)
			xc, _ := Crossing(c.Points, s.Threshold, true)
			if !ok {
				x, xc = math.NaN(), math.NaN()
			} else {
				a.Reached++
			}
			a.ToThreshold = append(a.ToThreshold, x)
			a.CPUToThreshold = append(a.CPUToThreshold, xc)
		}
		a.Final, a.Gain = NewStats(final), NewStats(gain(cs))
		s.Arms = append(s.Arms, a)
		arms[n] = &s.Arms[len(s.Arms)-1]
	}
	if baseGain < MinGain {
		s.NoRatio = fmt.Sprintf("outcome-only gained %.1f points (< %.0f): no ratio", 100*baseGain, 100*MinGain)
		s.Ratio, s.CPURatio, s.RatioOfMeans = NewStats(nil), NewStats(nil), math.NaN()
		return s, nil
	}
	b, h := arms[base], arms[hint]
	var cpu []float64
	for i, seed := range b.Seeds {
		j := indexOf(h.Seeds, seed)
		if j < 0 {
			continue
		}
		s.RatioSeeds = append(s.RatioSeeds, b.ToThreshold[i]/h.ToThreshold[j])
		cpu = append(cpu, b.CPUToThreshold[i]/h.CPUToThreshold[j])
	}
	s.Ratio, s.CPURatio = NewStats(s.RatioSeeds), NewStats(cpu)
	s.RatioOfMeans = NewStats(b.ToThreshold).Mean / NewStats(h.ToThreshold).Mean
	return s, nil
}

func indexOf(xs []int64, x int64) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
