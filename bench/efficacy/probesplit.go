package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/protocol3"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// probeSplit runs G2's diagnostic (efficacy.ProbeSplit) on the model at model, on the
// held-out episodes G2 probes, and writes dir/probe_split.json; with val > 0, on the
// first val validation tasks instead (the warm start's margin evals' episodes), into
// dir/probe_split_validation.json.
func probeSplit(ctx context.Context, backend backends.Backend, dir, model string, val int) error {
	p, err := efficacy.OpenPolicy(backend, model)
	if err != nil {
		return err
	}
	split, n, name := toolworld.SplitHeldout, 0, "probe_split.json"
	if val > 0 {
		split, n, name = toolworld.SplitValidation, val, "probe_split_validation.json"
	}
	held, err := toolworld.Tasks(split, n)
	if err != nil {
		return err
	}
	c0 := efficacy.CPUTime()
	d, err := efficacy.ProbeSplit(ctx, backend, p, held, protocol3.World(), 1, protocol3.ProbeSeed)
	if err != nil {
		return err
	}
	progress(fmt.Sprintf("probe split: %+v cpu %.0fs", d, (efficacy.CPUTime() - c0).Seconds()))
	b, err := json.MarshalIndent(efficacy.JSONSafe(struct {
		Command    string              `json:"command"`
		Model      string              `json:"model"`
		Split      efficacy.SplitDelta `json:"split"`
		CPUSeconds float64             `json:"cpu_seconds"`
	}{"go run ./bench/efficacy " + strings.Join(os.Args[1:], " "), model, d, (efficacy.CPUTime() - c0).Seconds()}), "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileBytes(filepath.Join(dir, name), append(b, '\n'), 0o644)
}
