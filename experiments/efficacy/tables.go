package efficacy

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// CurveTable renders held-out success at every eval point (rollouts consumed) per arm,
// mean ± sd over seeds: success at equal budget, point by point.
func (res Results) CurveTable() string {
	arms, byArm := res.RunsByArm()
	if len(arms) == 0 {
		return ""
	}
	var cols []int
	for _, r := range res.Runs {
		for _, p := range r.Curve.Points {
			if !slices.Contains(cols, p.Rollouts) {
				cols = append(cols, p.Rollouts)
			}
		}
	}
	slices.Sort(cols)
	var b strings.Builder
	b.WriteString("| arm \\ rollouts |")
	for _, c := range cols {
		fmt.Fprintf(&b, " %d |", c)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, a := range arms {
		fmt.Fprintf(&b, "| %s |", a)
		for _, c := range cols {
			var xs []float64
			for _, r := range byArm[a] {
				for _, p := range r.Curve.Points {
					if p.Rollouts == c {
						xs = append(xs, p.Success)
					}
				}
			}
			s := NewStats(xs)
			if s.N == 0 {
				b.WriteString(" – |")
				continue
			}
			fmt.Fprintf(&b, " %.1f%% ± %.1f |", 100*s.Mean, 100*s.Std)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// CreditTable renders the hint arms' credit statistics over training: per arm and
// phase (the steps between two evals), the mean over steps and seeds of |Δ|, the clip
// fraction, the pivot share, mean Δ on right and on wrong actions, and hints per step.
func (res Results) CreditTable() string {
	arms, byArm := res.RunsByArm()
	every := max(res.Config.EvalEvery, 1)
	var b strings.Builder
	b.WriteString("| arm | steps | hints / step | mean \\|Δ\\| | clip fraction | pivot share | Δ right actions | Δ wrong actions |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	rows := 0
	for _, a := range arms {
		steps := 0
		for _, r := range byArm[a] {
			steps = max(steps, len(r.Steps))
		}
		for lo := 1; lo <= steps; lo += every {
			hi := min(lo+every-1, steps)
			var hints, dabs, clip, piv, right, wrong []float64
			for _, r := range byArm[a] {
				for _, st := range r.Steps {
					if st.Step < lo || st.Step > hi {
						continue
					}
					hints = append(hints, float64(st.Hints))
					if st.Hints == 0 {
						continue
					}
					dabs, clip, piv = append(dabs, st.DeltaAbs), append(clip, st.ClipFrac), append(piv, st.Pivot)
					right, wrong = append(right, st.DeltaRight), append(wrong, st.DeltaWrong)
				}
			}
			if NewStats(hints).Mean == 0 || math.IsNaN(NewStats(hints).Mean) {
				continue // an arm without hints (outcome-only)
			}
			f := func(xs []float64, format string) string {
				s := NewStats(xs)
				if s.N == 0 {
					return "–"
				}
				return fmt.Sprintf(format, s.Mean)
			}
			fmt.Fprintf(&b, "| %s | %d–%d | %s | %s | %s | %s | %s | %s |\n", a, lo, hi, f(hints, "%.1f"), f(dabs, "%.3f"),
				f(clip, "%.3f"), f(piv, "%.2f"), f(right, "%+.3f"), f(wrong, "%+.3f"))
			rows++
		}
	}
	if rows == 0 {
		return ""
	}
	return b.String()
}

// RunsByArm groups the runs by arm, arms in first-seen order.
func (res Results) RunsByArm() ([]string, map[string][]Run) {
	var arms []string
	by := map[string][]Run{}
	for _, r := range res.Runs {
		a := r.Curve.Arm
		if _, ok := by[a]; !ok {
			arms = append(arms, a)
		}
		by[a] = append(by[a], r)
	}
	return arms, by
}
