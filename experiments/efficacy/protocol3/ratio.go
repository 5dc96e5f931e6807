package protocol3

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
)

// MinGain is protocol 3's least mean final gain of outcome-only (10 points) for which
// a threshold, and so a ratio, is reported (issue 27: the 2-point rule of MinGain is too
// weak to define a threshold).
const MinGain = 0.10

// The bounds of a SeedRatio when one of the pair never reached the threshold within
// the budget.
const (
	// BoundBelow: outcome-only reached the threshold, the arm did not: the ratio is
	// below outcome's rollouts over the budget.
	BoundBelow = "below"
	// BoundAbove: the arm reached it, outcome-only did not: the ratio is above the
	// budget over the arm's rollouts.
	BoundAbove = "above"
	// BoundNone: neither reached it; nothing is known.
	BoundNone = "none"
)

// SeedRatio is one seed's paired ratio: outcome-only's rollouts-to-threshold over the
// arm's, both linearly interpolated between evals (Crossing).
type SeedRatio struct {
	Seed int64 `json:"seed"`
	// Outcome and Arm are the rollouts to the threshold; NaN (null) where never reached.
	Outcome float64 `json:"outcome_rollouts"`
	Arm     float64 `json:"arm_rollouts"`
	// Ratio is Outcome / Arm when both reached the threshold, else NaN; Bound then says
	// which side of BoundValue it lies (BoundBelow, BoundAbove) or BoundNone.
	Ratio      float64 `json:"ratio"`
	Bound      string  `json:"bound,omitempty"`
	BoundValue float64 `json:"bound_value,omitempty"`
}

// ArmRatio is one arm's ratio against outcome-only: per seed, and the mean, sd (n−1),
// min and max over the seeds where both reached the threshold (Stats.N of them).
type ArmRatio struct {
	Arm     string         `json:"arm"`
	PerSeed []SeedRatio    `json:"per_seed"`
	Stats   efficacy.Stats `json:"stats"`
	// Censored counts the seeds with a bound only (one or both never reached the
	// threshold); the statistics leave them out, so read them with it.
	Censored int `json:"censored"`
}

// Summary is protocol 3's answer (docs/experiments/protocol3.md "Arms"): the
// threshold, every arm's curve summary and each arm's paired ratio.
type Summary struct {
	WarmStart float64 `json:"warm_start_success"`
	// OutcomeGain is outcome-only's mean final gain over seeds; Threshold the warm
	// start plus half of it.
	OutcomeGain float64 `json:"outcome_gain"`
	Threshold   float64 `json:"threshold"`
	// Budget is the rollouts of one run (the last eval's).
	Budget int            `json:"budget_rollouts"`
	Arms   []efficacy.Arm `json:"arms"`
	// Ratio holds each arm but outcome-only; nil with NoRatio set when outcome-only
	// gained less than MinGain.
	Ratio   map[string]ArmRatio `json:"ratio"`
	NoRatio string              `json:"no_ratio,omitempty"`
}

// Summarize computes protocol 3's summary of curves, arms in the order given
// (efficacy.ArmOutcome among them). Every arm must have run the same seeds as outcome-only,
// each once, and every curve the same budget: the ratio is paired by seed, and an
// unpaired seed is an error, not a seed left out.
func Summarize(curves []efficacy.Curve, arms []string) (Summary, error) {
	if !slices.Contains(arms, efficacy.ArmOutcome) {
		return Summary{}, fmt.Errorf("summarize: arms %v: need %s", arms, efficacy.ArmOutcome)
	}
	byArm := map[string][]efficacy.Curve{}
	for _, c := range curves {
		if !slices.Contains(arms, c.Arm) {
			return Summary{}, fmt.Errorf("summarize: a run of arm %q, not one of %v", c.Arm, arms)
		}
		if len(c.Points) < 2 {
			return Summary{}, fmt.Errorf("summarize: arm %s seed %d: %d evals, need the warm start and at least one more", c.Arm, c.Seed, len(c.Points))
		}
		byArm[c.Arm] = append(byArm[c.Arm], c)
	}
	seedsOf := func(a string) []int64 {
		var s []int64
		for _, c := range byArm[a] {
			s = append(s, c.Seed)
		}
		slices.Sort(s)
		return s
	}
	base := seedsOf(efficacy.ArmOutcome)
	if len(base) == 0 {
		return Summary{}, fmt.Errorf("summarize: no run of %s", efficacy.ArmOutcome)
	}
	budget := -1
	var warm []float64
	for _, a := range arms {
		s := seedsOf(a)
		if len(slices.Compact(slices.Clone(s))) != len(s) {
			return Summary{}, fmt.Errorf("summarize: arm %s: seeds %v: a seed ran twice", a, s)
		}
		if !slices.Equal(s, base) {
			return Summary{}, fmt.Errorf("summarize: arm %s ran seeds %v, %s ran %v: the ratio is paired by seed", a, s, efficacy.ArmOutcome, base)
		}
		for _, c := range byArm[a] {
			b := c.Points[len(c.Points)-1].Rollouts
			if budget >= 0 && b != budget {
				return Summary{}, fmt.Errorf("summarize: arm %s seed %d: budget %d rollouts, others %d: budgets must be equal", a, c.Seed, b, budget)
			}
			budget = b
			warm = append(warm, c.Points[0].Success)
		}
	}
	final := func(c efficacy.Curve) float64 { return c.Points[len(c.Points)-1].Success }
	s := Summary{WarmStart: efficacy.NewStats(warm).Mean, Budget: budget}
	var gains []float64
	for _, c := range byArm[efficacy.ArmOutcome] {
		gains = append(gains, final(c)-c.Points[0].Success)
	}
	s.OutcomeGain = efficacy.NewStats(gains).Mean
	s.Threshold = s.WarmStart + 0.5*s.OutcomeGain
	to := map[string]map[int64]float64{}
	for _, a := range arms {
		cs := byArm[a]
		sort.Slice(cs, func(i, j int) bool { return cs[i].Seed < cs[j].Seed })
		arm := efficacy.Arm{Name: a}
		to[a] = map[int64]float64{}
		var fin, gain []float64
		for _, c := range cs {
			arm.Seeds = append(arm.Seeds, c.Seed)
			fin, gain = append(fin, final(c)), append(gain, final(c)-c.Points[0].Success)
			x, ok := efficacy.Crossing(c.Points, s.Threshold, false)
			xc, _ := efficacy.Crossing(c.Points, s.Threshold, true)
			if !ok {
				x, xc = math.NaN(), math.NaN()
			} else {
				arm.Reached++
			}
			arm.ToThreshold, arm.CPUToThreshold = append(arm.ToThreshold, x), append(arm.CPUToThreshold, xc)
			to[a][c.Seed] = x
		}
		arm.Final, arm.Gain = efficacy.NewStats(fin), efficacy.NewStats(gain)
		s.Arms = append(s.Arms, arm)
	}
	if s.OutcomeGain < MinGain-1e-12 {
		s.NoRatio = fmt.Sprintf("outcome-only gained %.1f points on average (< %.0f): no threshold worth a ratio", 100*s.OutcomeGain, 100*MinGain)
		return s, nil
	}
	s.Ratio = map[string]ArmRatio{}
	for _, a := range arms {
		if a == efficacy.ArmOutcome {
			continue
		}
		ar := ArmRatio{Arm: a}
		var exact []float64
		for _, seed := range base {
			sr := PairRatio(seed, to[efficacy.ArmOutcome][seed], to[a][seed], float64(budget))
			if sr.Bound != "" {
				ar.Censored++
			} else {
				exact = append(exact, sr.Ratio)
			}
			ar.PerSeed = append(ar.PerSeed, sr)
		}
		ar.Stats = efficacy.NewStats(exact)
		s.Ratio[a] = ar
	}
	return s, nil
}

// PairRatio is one seed's ratio from outcome-only's and the arm's rollouts to the
// threshold (NaN: never reached within budget rollouts).
func PairRatio(seed int64, outcome, arm, budget float64) SeedRatio {
	sr := SeedRatio{Seed: seed, Outcome: outcome, Arm: arm, Ratio: math.NaN()}
	switch o, a := !math.IsNaN(outcome), !math.IsNaN(arm); {
	case o && a:
		sr.Ratio = outcome / arm
	case o:
		sr.Bound, sr.BoundValue = BoundBelow, outcome/budget
	case a:
		sr.Bound, sr.BoundValue = BoundAbove, budget/arm
	default:
		sr.Bound, sr.BoundValue = BoundNone, math.NaN()
	}
	return sr
}
