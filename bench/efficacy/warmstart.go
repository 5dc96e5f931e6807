package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// initModel writes a fresh byte-tokenizer model of preset into dir: tiny or small
// (data.PresetConfig), or mid, tiny widened to hidden 128 with heads of 32 and RoPE
// θ = 10000 (a 256-token world needs no longer wavelengths).
func initModel(dir, preset string, seed uint64) error {
	base := preset
	if preset == "mid" {
		base = "tiny"
	}
	if _, err := data.InitModel(dir, data.InitOptions{Preset: base, Tokenizer: "bytes", Seed: seed, Dtype: "float32"}); err != nil {
		return fmt.Errorf("init model: %w", err)
	}
	if preset != "mid" {
		return nil
	}
	path := filepath.Join(dir, data.ConfigFileName)
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	c, err := data.ParseModelConfig(raw)
	if err != nil {
		return err
	}
	c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim, c.IntermediateSize, c.RopeTheta = 128, 4, 2, 32, 384, 10000
	if err := c.Validate(); err != nil {
		return fmt.Errorf("init model: mid: %w", err)
	}
	w, err := data.InitWeights(c, seed)
	if err != nil {
		return err
	}
	if err := data.WriteModelConfig(path, c); err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(dir, safetensors.FileName), w, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	_, err = xla.Open(dir, xla.OpenOptions{})
	return err
}

// warmStart initialises the preset model, trains the warm start into dir and writes
// dir/warmstart.json beside it.
func warmStart(ctx context.Context, backend backends.Backend, dir, preset, from string, cfg efficacy.WarmStartConfig) error {
	tmp, err := os.MkdirTemp("", "efficacy-init-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	cfg.Init = filepath.Join(tmp, "init")
	if from != "" { // continue from a saved model (copied: Out may be the same directory)
		if err := os.CopyFS(cfg.Init, os.DirFS(from)); err != nil {
			return fmt.Errorf("copy %s: %w", from, err)
		}
		preset += " continued from " + from
	} else if err := initModel(cfg.Init, preset, cfg.Seed); err != nil {
		return err
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
	}{preset, "go run ./bench/efficacy " + strings.Join(os.Args[1:], " "), res}, "", "  ")
	return fsutil.WriteFileBytes(filepath.Join(filepath.Dir(dir), "warmstart.json"), append(b, '\n'), 0o644)
}
