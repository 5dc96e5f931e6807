package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/efficacy"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// warmStart initialises the preset model, trains the warm start into dir and writes
// dir/warmstart.json beside it.
func warmStart(ctx context.Context, backend backends.Backend, dir, preset string, cfg efficacy.WarmStartConfig) error {
	tmp, err := os.MkdirTemp("", "efficacy-init-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.Init = filepath.Join(tmp, "init")
	if _, err := data.InitModel(cfg.Init, data.InitOptions{Preset: preset, Tokenizer: "bytes", Seed: cfg.Seed, Dtype: "float32"}); err != nil {
		return fmt.Errorf("init model: %w", err)
	}
	cfg.Out = dir
	res, err := efficacy.WarmStart(ctx, backend, cfg, progress)
	if err != nil {
		return err
	}
	res.Config.Init, res.Config.Out = "(init-model -preset "+preset+")", filepath.Base(dir)
	b, _ := json.MarshalIndent(struct {
		Preset  string `json:"preset"`
		Command string `json:"command"`
		efficacy.WarmStartResult
	}{preset, "go run ./bench/efficacy -warmstart -backend xla-cpu", res}, "", "  ")
	return fsutil.WriteFileBytes(filepath.Join(filepath.Dir(dir), "warmstart.json"), append(b, '\n'), 0o644)
}
