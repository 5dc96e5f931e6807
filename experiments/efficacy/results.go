package efficacy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Results is results.json: the experiment's config, every run, and the summary.
type Results struct {
	// Partial is true while not every arm × seed has run (the file is rewritten after
	// each run).
	Partial bool    `json:"partial"`
	Command string  `json:"command"`
	Config  Config  `json:"config"`
	Seeds   []int64 `json:"seeds"`
	// Ratio is rollouts-to-threshold of outcome-only over hint credit, paired by seed
	// (Summary.Ratio); null with NoRatio set when there is none.
	Ratio   *Stats   `json:"ratio"`
	NoRatio string   `json:"no_ratio,omitempty"`
	Sweep   []Sweep  `json:"lr_sweep,omitempty"`
	Summary *Summary `json:"summary,omitempty"`
	// ArmCost is per arm: mean training CPU-seconds and wall seconds per run.
	ArmCost map[string]Cost `json:"arm_cost"`
	// Credit is per arm: the credit statistics averaged over steps and seeds.
	Credit map[string]StepStat `json:"credit"`
	Runs   []Run               `json:"runs"`
	// WallSeconds and CPUSeconds are the whole command's.
	WallSeconds float64 `json:"wall_seconds"`
	CPUSeconds  float64 `json:"cpu_seconds"`
}

// Cost is an arm's mean cost per run.
type Cost struct {
	CPUSeconds  float64 `json:"cpu_seconds"`
	WallSeconds float64 `json:"wall_seconds"`
	EvalCPU     float64 `json:"eval_cpu_seconds"`
}

// Sweep is one learning rate of the sweep: every arm's final validation success.
type Sweep struct {
	LR      float64            `json:"lr"`
	Success map[string]float64 `json:"validation_success"`
	Mean    float64            `json:"mean"`
}

// Experiment runs every arm with every seed, one run after another, calling save
// after each with the results so far.
func Experiment(ctx context.Context, r *Runner, save func(Results) error) (Results, error) {
	res := Results{Config: r.Config, Seeds: r.Config.Seeds, Partial: true}
	c0, t0 := CPUTime(), time.Now()
	// Seed-major (every arm with seed 1, then seed 2, …): one after another as before,
	// and a run cut short leaves every arm with the same seeds.
	for _, seed := range r.Config.Seeds {
		for _, arm := range r.Config.Arms {
			run, err := r.Run(ctx, arm, seed)
			if err != nil {
				return res, err
			}
			res.Runs = append(res.Runs, run)
			res.Partial = len(res.Runs) < len(r.Config.Arms)*len(r.Config.Seeds)
			res.CPUSeconds, res.WallSeconds = (CPUTime() - c0).Seconds(), time.Since(t0).Seconds()
			res.summarize()
			if err := save(res); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// ReadResults reads a results.json that Write wrote and summarizes its runs again
// (nulls, NaN when written, are NaN again).
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

// UnmarshalJSON reads a StepStat whose missing or null statistics are NaN.
func (s *StepStat) UnmarshalJSON(b []byte) error {
	type plain StepStat
	nan := math.NaN()
	p := plain{Loss: nan, DeltaAbs: nan, ClipFrac: nan, Pivot: nan, DeltaFailed: nan, DeltaOther: nan, DeltaRight: nan, DeltaWrong: nan, AOutAbs: nan, AHintAbs: nan, LossOut: nan, LossDistill: nan}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = StepStat(p)
	return nil
}

// summarize fills the summary, ratio, costs and credit means from the runs.
func (res *Results) summarize() {
	res.ArmCost, res.Credit = ArmCosts(res.Runs)
	var curves []Curve
	for _, run := range res.Runs {
		curves = append(curves, run.Curve)
	}
	res.Summary, res.Ratio, res.NoRatio = nil, nil, ""
	s, err := Summarize(curves, ArmOutcome, ArmHint)
	if err != nil {
		res.NoRatio = err.Error()
		return
	}
	res.Summary = &s
	res.NoRatio = s.NoRatio
	if s.NoRatio == "" && s.Ratio.N > 0 {
		r := s.Ratio
		res.Ratio = &r
	} else if s.NoRatio == "" {
		res.NoRatio = "hint credit never reached the threshold on a seed where outcome-only did (or neither did)"
	}
}

// ArmCosts returns per arm the mean cost of a run and the credit statistics averaged
// over steps and runs.
func ArmCosts(runs []Run) (map[string]Cost, map[string]StepStat) {
	costs, credits := map[string]Cost{}, map[string]StepStat{}
	n := map[string]float64{}
	for _, run := range runs {
		a := run.Curve.Arm
		c := costs[a]
		c.CPUSeconds += run.CPUSeconds
		c.WallSeconds += run.WallSeconds
		c.EvalCPU += run.EvalCPU
		costs[a] = c
		n[a]++
		credits[a] = meanSteps(credits[a], run.Steps, n[a])
	}
	for a, c := range costs {
		costs[a] = Cost{CPUSeconds: c.CPUSeconds / n[a], WallSeconds: c.WallSeconds / n[a], EvalCPU: c.EvalCPU / n[a]}
	}
	return costs, credits
}

// meanSteps folds one run's step statistics (their mean) into the running mean acc of
// k runs; NaNs are left out.
func meanSteps(acc StepStat, steps []StepStat, k float64) StepStat {
	mean := func(f func(StepStat) float64) float64 {
		var s float64
		var m int
		for _, st := range steps {
			if v := f(st); !math.IsNaN(v) {
				s, m = s+v, m+1
			}
		}
		if m == 0 {
			return math.NaN()
		}
		return s / float64(m)
	}
	fold := func(old, v float64) float64 {
		switch {
		case k == 1 || math.IsNaN(old):
			return v
		case math.IsNaN(v):
			return old
		}
		return old + (v-old)/k
	}
	hints, dtok := 0, 0
	for _, st := range steps {
		hints, dtok = hints+st.Hints, dtok+st.DistillTokens
	}
	return StepStat{
		Step:        len(steps),
		Success:     fold(acc.Success, mean(func(s StepStat) float64 { return s.Success })),
		Loss:        fold(acc.Loss, mean(func(s StepStat) float64 { return s.Loss })),
		Hints:       acc.Hints + hints,
		DeltaAbs:    fold(acc.DeltaAbs, mean(func(s StepStat) float64 { return nanIfNoHints(s, s.DeltaAbs) })),
		ClipFrac:    fold(acc.ClipFrac, mean(func(s StepStat) float64 { return nanIfNoHints(s, s.ClipFrac) })),
		Pivot:       fold(acc.Pivot, mean(func(s StepStat) float64 { return nanIfNoHints(s, s.Pivot) })),
		DeltaFailed: fold(acc.DeltaFailed, mean(func(s StepStat) float64 { return s.DeltaFailed })),
		DeltaOther:  fold(acc.DeltaOther, mean(func(s StepStat) float64 { return s.DeltaOther })),
		DeltaRight:  fold(acc.DeltaRight, mean(func(s StepStat) float64 { return s.DeltaRight })),
		DeltaWrong:  fold(acc.DeltaWrong, mean(func(s StepStat) float64 { return s.DeltaWrong })),
		AOutAbs:     fold(acc.AOutAbs, mean(func(s StepStat) float64 { return s.AOutAbs })),
		AHintAbs:    fold(acc.AHintAbs, mean(func(s StepStat) float64 { return nanIfNoHints(s, s.AHintAbs) })),
		LossOut:     fold(acc.LossOut, mean(func(s StepStat) float64 { return s.LossOut })),
		LossDistill: fold(acc.LossDistill, mean(func(s StepStat) float64 { return nanIfNoHints(s, s.LossDistill) })),
		// DistillTokens is summed over steps and runs, like Hints.
		DistillTokens: acc.DistillTokens + dtok,
	}
}

func nanIfNoHints(s StepStat, v float64) float64 {
	if s.Hints == 0 {
		return math.NaN()
	}
	return v
}

// Write writes results.json, efficacy.png (success vs rollouts), efficacy_cpu.png
// (success vs training CPU-seconds) and results.md (the report table) into dir.
func (res Results) Write(dir string) error {
	var curves []Curve
	for _, r := range res.Runs {
		curves = append(curves, r.Curve)
	}
	thr := math.NaN()
	if res.Summary != nil {
		thr = res.Summary.Threshold
	}
	title := "Efficacy: held-out success vs rollouts"
	if res.Partial {
		title += " (partial)"
	}
	md := res.Table() + "\nSuccess at equal budget (held-out, mean ± sd over seeds):\n\n" + res.CurveTable()
	if ct := res.CreditTable(); ct != "" {
		md += "\nCredit statistics over training (mean over steps and seeds):\n\n" + ct
	}
	return WriteResultFiles(dir, jsonSafe(res), curves, thr, title, md)
}

// WriteResultFiles writes a protocol's results into dir: results.json (v, JSON-ready),
// efficacy.png (curves' success against rollouts, with the threshold thr; NaN: none),
// efficacy_cpu.png (against training CPU-seconds) and results.md (md).
func WriteResultFiles(dir string, v any, curves []Curve, thr float64, title, md string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := fsutil.WriteFileBytes(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	var png bytes.Buffer
	if err := PlotPNG(&png, curves, thr, title); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := fsutil.WriteFileBytes(filepath.Join(dir, "efficacy.png"), png.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	png.Reset()
	if err := PlotCPUPNG(&png, curves, thr, strings.Replace(title, "rollouts", "CPU-seconds", 1)); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	if err := fsutil.WriteFileBytes(filepath.Join(dir, "efficacy_cpu.png"), png.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return fsutil.WriteFileBytes(filepath.Join(dir, "results.md"), []byte(md), 0o644)
}

// jsonSafe returns res as JSON-ready values with NaN and ±Inf as null (JSON has
// neither; a NaN is "never reached" or "no hints").
func jsonSafe(res Results) any { return nanToNull(reflect.ValueOf(res)) }

// JSONSafe returns v as JSON-ready values with NaN and ±Inf as null.
func JSONSafe(v any) any { return nanToNull(reflect.ValueOf(v)) }

func nanToNull(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f
		}
		return nil
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return nanToNull(v.Elem())
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return nil
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = nanToNull(v.Index(i))
		}
		return out
	case reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			out[fmt.Sprint(k.Interface())] = nanToNull(v.MapIndex(k))
		}
		return out
	case reflect.Struct:
		out := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(opts, "omitempty") && fv.IsZero() {
				continue
			}
			out[name] = nanToNull(fv)
		}
		return out
	}
	return v.Interface()
}

// Table renders the report table: per arm the final success, gain, rollouts- and
// CPU-seconds-to-threshold over seeds, cost and credit statistics, then the ratio.
func (res Results) Table() string {
	var b strings.Builder
	pct := func(s Stats) string {
		if math.IsNaN(s.Mean) {
			return "–"
		}
		return fmt.Sprintf("%.1f%% ± %.1f", 100*s.Mean, 100*s.Std)
	}
	num := func(x float64, f string) string {
		if math.IsNaN(x) {
			return "–"
		}
		return fmt.Sprintf(f, x)
	}
	if res.Partial {
		b.WriteString("**Partial results**: not every arm × seed has run.\n\n")
	}
	if res.Summary == nil {
		b.WriteString("No summary yet: " + res.NoRatio + "\n")
		return b.String()
	}
	s := res.Summary
	fmt.Fprintf(&b, "Warm start %.1f%%, threshold %.1f%% (warm start + 50%% of outcome-only's mean gain).\n\n", 100*s.WarmStart, 100*s.Threshold)
	b.WriteString("| arm | seeds | final success (mean ± sd) | gain (points) | rollouts to threshold (per seed) | reached | train CPU-s / run | wall s / run | mean \\|Δ\\| | clip fraction | pivot share | Δ on failed calls | Δ right / wrong actions |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, a := range s.Arms {
		var tt []string
		for _, x := range a.ToThreshold {
			tt = append(tt, num(x, "%.0f"))
		}
		if s.NoRatio != "" { // a threshold below the warm start: every run "reaches" it at 0
			tt = []string{"n/a"}
		}
		c, cr := res.ArmCost[a.Name], res.Credit[a.Name]
		rw := "–"
		if !math.IsNaN(cr.DeltaRight) || !math.IsNaN(cr.DeltaWrong) {
			rw = num(cr.DeltaRight, "%+.3f") + " / " + num(cr.DeltaWrong, "%+.3f")
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d/%d | %.0f | %.0f | %s | %s | %s | %s | %s |\n", a.Name, len(a.Seeds), pct(a.Final),
			num(100*a.Gain.Mean, "%+.1f"), strings.Join(tt, ", "), a.Reached, len(a.Seeds), c.CPUSeconds, c.WallSeconds,
			num(cr.DeltaAbs, "%.3f"), num(cr.ClipFrac, "%.3f"), num(cr.Pivot, "%.2f"), num(cr.DeltaFailed, "%+.3f"), rw)
	}
	b.WriteString("\n")
	if res.Ratio != nil {
		fmt.Fprintf(&b, "Ratio (outcome-only ÷ hint credit, rollouts to threshold, paired by seed): **%.2f× ± %.2f** (min %.2f, max %.2f, %d seeds); ratio of means %.2f×; CPU-seconds ratio %s.\n",
			res.Ratio.Mean, res.Ratio.Std, res.Ratio.Min, res.Ratio.Max, res.Ratio.N, s.RatioOfMeans, num(s.CPURatio.Mean, "%.2f×"))
	} else {
		fmt.Fprintf(&b, "No ratio: %s.\n", res.NoRatio)
	}
	return b.String()
}
