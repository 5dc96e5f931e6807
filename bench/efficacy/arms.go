package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// runArms runs the learning-rate sweep (when lrs is set: every arm at each rate with
// seed 1 for sweepSteps steps on the validation split; the rate with the best mean
// final success over arms wins), then every arm with every seed on the held-out split, writing the
// results after each run.
func runArms(ctx context.Context, backend backends.Backend, cfg efficacy.Config, lrs string, sweepSteps int, out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	command := "go run ./bench/efficacy " + strings.Join(os.Args[1:], " ")
	var sweep []efficacy.Sweep
	if lrs != "" {
		sc := cfg
		sc.Seeds, sc.EvalSplit, sc.EvalTasks = []int64{1}, toolworld.SplitValidation, toolworld.SplitSizes[toolworld.SplitValidation]
		if sweepSteps > 0 {
			sc.Steps = sweepSteps
		}
		sc.EvalEvery = sc.Steps
		r := &efficacy.Runner{Backend: backend, Config: sc, Progress: progress}
		defer r.Close()
		best := -1.0
		for _, f := range strings.Split(lrs, ",") {
			lr, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil {
				return fmt.Errorf("-lrs: %q: %w", f, err)
			}
			r.Config.LR = lr
			sw := efficacy.Sweep{LR: lr, Success: map[string]float64{}}
			for _, arm := range sc.Arms {
				run, err := r.Run(ctx, arm, 1)
				if err != nil {
					return err
				}
				sw.Success[arm] = run.Curve.Points[len(run.Curve.Points)-1].Success
				sw.Mean += sw.Success[arm] / float64(len(sc.Arms))
			}
			progress(fmt.Sprintf("sweep: lr %g mean validation success %.1f%% %v", lr, 100*sw.Mean, sw.Success))
			sweep = append(sweep, sw)
			if sw.Mean > best {
				best, cfg.LR = sw.Mean, lr
			}
		}
		progress(fmt.Sprintf("sweep: lr %g chosen for every arm", cfg.LR))
	}
	r := &efficacy.Runner{Backend: backend, Config: cfg, Progress: progress}
	defer r.Close()
	save := func(res efficacy.Results) error {
		res.Command, res.Sweep = command, sweep
		return res.Write(out)
	}
	res, err := efficacy.Experiment(ctx, r, save)
	if err != nil {
		return err
	}
	fmt.Print(res.Table())
	return nil
}
