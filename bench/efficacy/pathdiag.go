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
)

// diagnosePaths plays greedy held-out episodes of families with the model in model
// (protocol3.DiagnosePaths, G3's world), prints where the failures left the solution's
// path and writes dir/path_diagnosis.json.
func diagnosePaths(ctx context.Context, backend backends.Backend, dir, model string, families []string) error {
	c0 := efficacy.CPUTime()
	ds, err := protocol3.DiagnosePaths(ctx, backend, model, protocol3.World(), families)
	if err != nil {
		return err
	}
	for _, d := range ds {
		progress(fmt.Sprintf("paths %s: %d/%d greedy successes", d.Family, d.Success, d.Episodes))
		for _, f := range d.Failures {
			progress(fmt.Sprintf("  %3d failed before the solution's `%s` call, ended by %s", f.N, f.Stuck, f.End))
		}
	}
	sum, err := protocol3.ModelDigest(model)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(struct {
		Command     string                    `json:"command"`
		ModelSHA256 string                    `json:"model_sha256"`
		CPUSeconds  float64                   `json:"cpu_seconds"`
		Families    []protocol3.PathDiagnosis `json:"families"`
	}{"go run ./bench/efficacy " + strings.Join(os.Args[1:], " "), sum, (efficacy.CPUTime() - c0).Seconds(), ds}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fsutil.WriteFileBytes(filepath.Join(dir, "path_diagnosis.json"), append(b, '\n'), 0o644)
}
