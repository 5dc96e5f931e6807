package protocol3

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
)

// Results is protocol 3's arms' results.json: the config, the gates the arms ran
// under, every run, each arm's ratio against outcome-only and the summary.
type Results struct {
	// Partial is true while not every arm × seed has run; the summary then covers
	// the seeds every arm has finished.
	Partial bool            `json:"partial"`
	Command string          `json:"command"`
	Config  efficacy.Config `json:"config"`
	Seeds   []int64         `json:"seeds"`
	// Gates are the gates read before the first arm (CheckGates passed them, or a test
	// bypassed the check and says so in GatesBypassed).
	Gates         GateSet `json:"gates"`
	GatesBypassed bool    `json:"gates_bypassed,omitempty"`
	// Ratio is per arm but outcome-only (Summary.Ratio); null per arm, with NoRatio
	// set, when there is none.
	Ratio   map[string]*ArmRatio `json:"ratio"`
	NoRatio string               `json:"no_ratio,omitempty"`
	Summary *Summary             `json:"summary,omitempty"`
	// ArmCost is per arm: mean training CPU-seconds and wall seconds per run.
	ArmCost map[string]efficacy.Cost `json:"arm_cost"`
	// Credit is per arm: the credit statistics averaged over steps and seeds.
	Credit map[string]efficacy.StepStat `json:"credit"`
	Runs   []efficacy.Run               `json:"runs"`
	// WallSeconds and CPUSeconds are the whole command's.
	WallSeconds float64 `json:"wall_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
}

// Experiment runs protocol 3's arms (r.Config.Protocol 3), seed-major as Experiment
// does, calling save after each run with the results so far. The gates are recorded
// as given: the caller has checked them (ArmsReady).
func Experiment(ctx context.Context, r *efficacy.Runner, gates GateSet, save func(Results) error) (Results, error) {
	if r.Config.Protocol != 3 {
		return Results{}, fmt.Errorf("experiment 3: config of protocol %d", r.Config.Protocol)
	}
	var out Results
	res, err := efficacy.Experiment(ctx, r, func(res efficacy.Results) error {
		out = NewResults(res, gates)
		return save(out)
	})
	if err != nil {
		return out, err
	}
	return NewResults(res, gates), nil
}

// NewResults summarizes the runs of res (protocol 3's) under gates.
func NewResults(res efficacy.Results, gates GateSet) Results {
	out := Results{Partial: res.Partial, Command: res.Command, Config: res.Config, Seeds: res.Config.Seeds, Gates: gates,
		Runs: res.Runs, WallSeconds: res.WallSeconds, CPUSeconds: res.CPUSeconds}
	out.summarize()
	return out
}

// summarize fills the summary, ratios, costs and credit means from the runs; while
// partial, from the seeds every arm has finished.
func (res *Results) summarize() {
	res.ArmCost, res.Credit = efficacy.ArmCosts(res.Runs)
	res.Summary, res.Ratio, res.NoRatio = nil, map[string]*ArmRatio{}, ""
	for _, a := range res.Config.Arms {
		if a != efficacy.ArmOutcome {
			res.Ratio[a] = nil
		}
	}
	done := map[int64]int{}
	for _, run := range res.Runs {
		done[run.Curve.Seed]++
	}
	var curves []efficacy.Curve
	for _, run := range res.Runs {
		if !res.Partial || done[run.Curve.Seed] == len(res.Config.Arms) {
			curves = append(curves, run.Curve)
		}
	}
	if len(curves) == 0 {
		res.NoRatio = "no seed has run every arm yet"
		return
	}
	s, err := Summarize(curves, res.Config.Arms)
	if err != nil {
		res.NoRatio = err.Error()
		return
	}
	res.Summary, res.NoRatio = &s, s.NoRatio
	for a, r := range s.Ratio {
		res.Ratio[a] = &r
	}
}

// ReadResults reads a results.json that Results.Write wrote and summarizes its runs
// again.
func ReadResults(path string) (Results, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Results{}, fmt.Errorf("read results: %w", err)
	}
	var res Results
	if err := json.Unmarshal(raw, &res); err != nil {
		return Results{}, fmt.Errorf("read results %s: %w", path, err)
	}
	res.summarize()
	return res, nil
}

// Write writes results.json, efficacy.png (held-out success against rollouts, with
// the threshold), efficacy_cpu.png (against training CPU-seconds) and results.md
// (Table, success at equal budget, credit statistics) into dir.
func (res Results) Write(dir string) error {
	var curves []efficacy.Curve
	for _, r := range res.Runs {
		curves = append(curves, r.Curve)
	}
	thr := math.NaN()
	if res.Summary != nil && res.Summary.NoRatio == "" {
		thr = res.Summary.Threshold
	}
	title := "Protocol 3: held-out success vs rollouts"
	if res.Partial {
		title += " (partial)"
	}
	base := efficacy.Results{Config: res.Config, Runs: res.Runs}
	md := res.Table() + "\nSuccess at equal budget (held-out, mean ± sd over seeds):\n\n" + base.CurveTable() +
		"\nCredit statistics over training (per run, mean over steps and seeds):\n\n" + res.CreditTable()
	return efficacy.WriteResultFiles(dir, efficacy.JSONSafe(res), curves, thr, title, md)
}

// Table renders the report: the gates, the threshold, per arm the final success, gain,
// rollouts-to-threshold per seed, the paired ratio against outcome-only (per seed,
// mean ± sd, min–max) and the cost of a run.
func (res Results) Table() string {
	var b strings.Builder
	if res.Partial {
		b.WriteString("**Partial results**: not every arm × seed has run; the summary covers the seeds every arm has finished.\n\n")
	}
	var gs []string
	for _, k := range GateKeys {
		g, ok := res.Gates[k.Name]
		switch {
		case !ok:
			gs = append(gs, k.Name+" not measured")
		case g.Pass:
			gs = append(gs, k.Name+" pass")
		default:
			gs = append(gs, k.Name+" FAIL")
		}
	}
	fmt.Fprintf(&b, "Gates: %s", strings.Join(gs, ", "))
	if res.GatesBypassed {
		b.WriteString(" (**bypassed**: a test run, not an experiment)")
	}
	b.WriteString(".\n\n")
	s := res.Summary
	if s == nil {
		b.WriteString("No summary: " + res.NoRatio + ".\n")
		return b.String()
	}
	fmt.Fprintf(&b, "Warm start %.1f%%; outcome-only's mean final gain %+.1f points; threshold %.1f%% (warm start + 50%% of that gain); budget %d rollouts a run.\n\n",
		100*s.WarmStart, 100*s.OutcomeGain, 100*s.Threshold, s.Budget)
	num := func(x float64, f string) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "–"
		}
		return fmt.Sprintf(f, x)
	}
	b.WriteString("| arm | seeds | final success (mean ± sd) | gain (points) | rollouts to threshold (per seed) | ratio per seed | ratio mean ± sd (min–max, n) | train CPU-s / run | eval CPU-s / run | wall s / run |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range s.Arms {
		var tt []string
		for _, x := range a.ToThreshold {
			tt = append(tt, num(x, "%.0f"))
		}
		if s.NoRatio != "" { // no threshold worth the name: every run "reaches" it at once
			tt = []string{"n/a"}
		}
		per, agg := "–", "–"
		if r, ok := s.Ratio[a.Name]; ok {
			var ps []string
			for _, sr := range r.PerSeed {
				switch sr.Bound {
				case "":
					ps = append(ps, fmt.Sprintf("%.2f", sr.Ratio))
				case BoundBelow:
					ps = append(ps, fmt.Sprintf("< %.2f", sr.BoundValue))
				case BoundAbove:
					ps = append(ps, fmt.Sprintf("> %.2f", sr.BoundValue))
				default:
					ps = append(ps, "neither reached")
				}
			}
			per = strings.Join(ps, ", ")
			if r.Stats.N > 0 {
				agg = fmt.Sprintf("**%.2f× ± %.2f** (%.2f–%.2f, %d)", r.Stats.Mean, r.Stats.Std, r.Stats.Min, r.Stats.Max, r.Stats.N)
			}
			if r.Censored > 0 {
				agg += fmt.Sprintf("; %d seed(s) bounded only", r.Censored)
			}
		}
		c := res.ArmCost[a.Name]
		fmt.Fprintf(&b, "| %s | %d | %.1f%% ± %.1f | %+.1f | %s | %s | %s | %.0f | %.0f | %.0f |\n", a.Name, len(a.Seeds), 100*a.Final.Mean, 100*a.Final.Std,
			100*a.Gain.Mean, strings.Join(tt, ", "), per, agg, c.CPUSeconds, c.EvalCPU, c.WallSeconds)
	}
	b.WriteString("\n")
	if s.NoRatio != "" {
		fmt.Fprintf(&b, "No ratio: %s.\n", s.NoRatio)
	} else {
		b.WriteString("Ratio: outcome-only's rollouts to the threshold ÷ the arm's, paired by seed; a seed where one of the two never reached the threshold within the budget gives a bound only and is left out of the mean.\n")
	}
	return b.String()
}

// CreditTable renders per arm what its teacher did and the two loss terms: hint spans
// a step, the context kinds, mean loss terms over steps, distillation tokens a step.
func (res Results) CreditTable() string {
	var b strings.Builder
	b.WriteString("| arm | hint spans / step | contexts (per run) | loss_out | loss_distill | distillation tokens / step | placebo: moved / dropped |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	arms, byArm := efficacy.Results{Runs: res.Runs}.RunsByArm()
	for _, a := range arms {
		runs := byArm[a]
		var steps, hints, dtok, moved, same int
		kinds := map[string]int{}
		for _, r := range runs {
			steps += len(r.Steps)
			for _, st := range r.Steps {
				hints, dtok = hints+st.Hints, dtok+st.DistillTokens
			}
			for k, v := range r.Hints.ByReason {
				kinds[k] += v
			}
			for k, v := range r.Hints.Contexts {
				kinds["teacher:"+k] += v
			}
			moved, same = moved+r.Hints.Placebo, same+r.Hints.PlaceboSameTask
		}
		var ks []string
		for k, v := range kinds {
			ks = append(ks, fmt.Sprintf("%s %.0f", k, float64(v)/float64(len(runs))))
		}
		slices.Sort(ks)
		cr := res.Credit[a]
		num := func(x float64) string {
			if math.IsNaN(x) {
				return "–"
			}
			return fmt.Sprintf("%.4f", x)
		}
		pl := "–"
		if a == efficacy.ArmPlacebo {
			pl = fmt.Sprintf("%d / %d", moved, same)
		}
		fmt.Fprintf(&b, "| %s | %.1f | %s | %s | %s | %.0f | %s |\n", a, float64(hints)/float64(max(steps, 1)), strings.Join(ks, ", "),
			num(cr.LossOut), num(cr.LossDistill), float64(dtok)/float64(max(steps, 1)), pl)
	}
	return b.String()
}
