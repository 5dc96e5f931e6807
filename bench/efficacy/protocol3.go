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
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// warmStart3 trains protocol 3's warm start into dir/warmstart/model from the model
// directory from (protocol 1's warm start by default) and writes dir/warmstart/warmstart.json.
func warmStart3(ctx context.Context, backend backends.Backend, dir, from string, cfg efficacy.WarmStart3Config) error {
	tmp, err := os.MkdirTemp("", "efficacy-init3-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.Init = filepath.Join(tmp, "init")
	if err := os.CopyFS(cfg.Init, os.DirFS(from)); err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	cfg.Out = filepath.Join(dir, "warmstart", "model")
	if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err != nil {
		return err
	}
	res, err := efficacy.WarmStart3(ctx, backend, cfg, progress)
	if err != nil {
		return err
	}
	res.Config.Init, res.Config.Out = from, "model"
	b, err := json.MarshalIndent(efficacy.JSONSafe(struct {
		Command string                    `json:"command"`
		Result  efficacy.WarmStart3Result `json:"result"`
	}{"go run ./bench/efficacy " + strings.Join(os.Args[1:], " "), res}), "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileBytes(filepath.Join(dir, "warmstart", "warmstart.json"), append(b, '\n'), 0o644)
}

// gates3 measures G1–G3 of dir/warmstart/model and writes dir/gates.json.
func gates3(ctx context.Context, backend backends.Backend, dir string, groups int) error {
	g, err := efficacy.MeasureGates3(ctx, backend, filepath.Join(dir, "warmstart", "model"), efficacy.Protocol3World(), efficacy.LiveWorld(), groups, progress)
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
