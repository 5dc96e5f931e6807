package protocol3

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/xla"
)

// BenchmarkArmsStep measures what one training step and one held-out eval cost in
// each of protocol 3's arms, at the pre-registered settings (8 tasks × G = 8 at
// temperature 1 in World, evals of all 250 held-out tasks), from a warm start
// — $HINDSIGHT_BENCH_ARMS3_MODEL, default protocol 1's (bench/efficacy/warmstart/model)
// — for $HINDSIGHT_BENCH_ARMS3_STEPS steps (default 3) per arm, seed 1, one arm after
// another. It reports CPU-seconds per step and per eval and each arm's ratio to
// outcome-only's, and projects the CPU-seconds of the whole experiment (3 seeds × 4
// arms × 48 steps and 4 evals, plus the warm start's eval). It bypasses the gates: a
// cost measure, not an experiment.
//
//	HINDSIGHT_TEST_BACKEND=xla-cpu go test -run '^$' -bench Arms3Step -benchtime 1x ./experiments/efficacy/
func BenchmarkArmsStep(b *testing.B) {
	spec := efficacytest.BackendSpec()
	model := "../../../bench/efficacy/warmstart/model"
	if m := os.Getenv("HINDSIGHT_BENCH_ARMS3_MODEL"); m != "" {
		model = m
	}
	steps := 3
	if s := os.Getenv("HINDSIGHT_BENCH_ARMS3_STEPS"); s != "" {
		var err error
		steps, err = strconv.Atoi(s)
		require.NoError(b, err)
	}
	backend, err := xla.NewBackend(xla.ResolveBackend(spec, ""))
	require.NoError(b, err)
	cfg := Config()
	cfg.Model, cfg.LR, cfg.Seeds, cfg.Steps, cfg.EvalEvery = model, 1e-3, []int64{1}, steps, steps
	require.NoError(b, cfg.Validate())
	for range b.N {
		r := &efficacy.Runner{Backend: backend, Config: cfg, Progress: func(s string) { b.Log(s) }}
		step, eval := map[string]float64{}, map[string]float64{}
		for _, a := range cfg.Arms {
			run, err := r.Run(b.Context(), a, 1)
			require.NoError(b, err)
			step[a], eval[a] = run.CPUSeconds/float64(steps), run.EvalCPU
			b.Logf("%s: %d steps, %.1f CPU-s a step, an eval %.1f CPU-s, hints %d, wall %.0f s", a, steps, step[a], eval[a], run.Hints.Hints, run.WallSeconds)
		}
		require.NoError(b, r.Close())
		total := 0.0
		for _, a := range cfg.Arms {
			b.ReportMetric(step[a], a+"-cpu-s/step")
			b.ReportMetric(step[a]/step[efficacy.ArmOutcome], a+"-step/outcome")
			total += 3 * (48*step[a] + 4*eval[a])
		}
		total += eval[efficacy.ArmOutcome] // the warm start's eval, once
		b.ReportMetric(total, "projected-cpu-s")
		fmt.Printf("projected experiment: %.0f CPU-seconds (%.1f CPU-hours)\n", total, total/3600)
	}
}
