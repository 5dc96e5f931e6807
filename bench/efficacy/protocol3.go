package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/protocol3"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// warmStart3 trains protocol 3's warm start into dir/warmstart/model from the model
// directory from (protocol 1's warm start by default), first grown to cfg.GrowLayers
// layers when that is set (protocol3.GrowLayers, seed cfg.Seed), and writes
// dir/warmstart/warmstart.json.
func warmStart3(ctx context.Context, backend backends.Backend, dir, from string, cfg protocol3.WarmStartConfig) error {
	tmp, err := os.MkdirTemp("", "efficacy-init3-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.Init = filepath.Join(tmp, "init")
	if err := os.CopyFS(cfg.Init, os.DirFS(from)); err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	if cfg.GrowLayers > 0 {
		grown := filepath.Join(tmp, "grown")
		if err := protocol3.GrowLayers(cfg.Init, grown, cfg.GrowLayers, cfg.Seed); err != nil {
			return err
		}
		cfg.Init = grown
		progress(fmt.Sprintf("warm start 3: %s grown to %d layers (new layers' o_proj and down_proj at zero)", from, cfg.GrowLayers))
	}
	cfg.Out = filepath.Join(dir, "warmstart", "model")
	if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err != nil {
		return err
	}
	res, err := protocol3.WarmStart(ctx, backend, cfg, progress)
	if err != nil {
		return err
	}
	res.Config.Init, res.Config.Out = from, "model"
	if cfg.MarginTasks > 0 && len(res.Validation) > 0 {
		var png bytes.Buffer
		if err := protocol3.PlotCopyCurve(&png, res.Validation, res.Steps, "protocol 3 warm start: the copy on validation"); err != nil {
			return err
		}
		if err := fsutil.WriteFileBytes(filepath.Join(dir, "warmstart", "curve.png"), png.Bytes(), 0o644); err != nil {
			return err
		}
	}
	sum, err := protocol3.ModelDigest(cfg.Out) // the weights are not committed from attempt 5 on
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(efficacy.JSONSafe(struct {
		Command     string                    `json:"command"`
		ModelSHA256 string                    `json:"model_sha256"`
		Result      protocol3.WarmStartResult `json:"result"`
	}{"go run ./bench/efficacy " + strings.Join(os.Args[1:], " "), sum, res}), "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileBytes(filepath.Join(dir, "warmstart", "warmstart.json"), append(b, '\n'), 0o644)
}

// gates3 measures G1–G3 of dir/warmstart/model and writes dir/gates.json.
func gates3(ctx context.Context, backend backends.Backend, dir string, groups int) error {
	g, err := protocol3.MeasureGates(ctx, backend, filepath.Join(dir, "warmstart", "model"), protocol3.World(), protocol3.LiveWorld(), groups, progress)
	if err != nil {
		return err
	}
	g.Command = "go run ./bench/efficacy " + strings.Join(os.Args[1:], " ")
	b, err := json.MarshalIndent(efficacy.JSONSafe(g), "", "  ")
	if err != nil {
		return err
	}
	fmt.Printf("G1 %v %v\nG2 %v %v\nG3 %v %v\n", g.G1.Pass, g.G1.Measured, g.G2.Pass, g.G2.Measured, g.G3.Pass, g.G3.Measured)
	return fsutil.WriteFileBytes(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644)
}

// runPilot runs protocol 3's G4 (protocol3.Pilot) at each rate of lrs and adds it to
// dir/results.json.
func runPilot(ctx context.Context, backend backends.Backend, cfg efficacy.Config, lrs, dir string) error {
	var grid []float64
	for _, f := range strings.Split(lrs, ",") {
		lr, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil {
			return fmt.Errorf("-pilot-lrs: %q: %w", f, err)
		}
		grid = append(grid, lr)
	}
	path := filepath.Join(dir, "results.json")
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("pilot: %w (measure G1–G3 first: -gates)", err)
	}
	p, err := protocol3.Pilot(ctx, backend, cfg, grid, progress)
	if err != nil {
		return err
	}
	p.Command = "go run ./bench/efficacy " + strings.Join(os.Args[1:], " ")
	if err := protocol3.WritePilot(path, p); err != nil {
		return err
	}
	fmt.Printf("G4 %v: outcome-only gained %+.1f points on the validation split at lr %g (gains %v at %v)\n", p.Pass, 100*p.Gain, p.LR, p.Gains, p.LRs)
	return nil
}

// runArms3 runs protocol 3's arms into out, refused unless dir/results.json records
// G1–G4 passed on this warm start.
func runArms3(ctx context.Context, backend backends.Backend, cfg efficacy.Config, dir, out string) error {
	res, err := protocol3.RunArms(ctx, backend, cfg, filepath.Join(dir, "results.json"), out,
		"go run ./bench/efficacy "+strings.Join(os.Args[1:], " "), progress)
	if err != nil {
		return err
	}
	fmt.Print(res.Table())
	return nil
}
