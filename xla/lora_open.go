package xla

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// IsAdapterDir reports whether dir is a PEFT adapter directory (adapter_config.json,
// no config.json) rather than a model directory.
func IsAdapterDir(dir string) bool {
	_, errA := os.Stat(filepath.Join(dir, filepath.Base(checkpoint.AdapterConfigFileName)))
	_, errC := os.Stat(filepath.Join(dir, data.ConfigFileName))
	return errA == nil && errors.Is(errC, os.ErrNotExist)
}

// AdapterBase returns the base model directory of adapter directory dir: base when
// given, else the adapter's base_model_name_or_path, taken relative to dir when it
// is not absolute.
func AdapterBase(dir, base string) (string, error) {
	if base != "" {
		return base, nil
	}
	cfg, err := ReadAdapterConfig(dir)
	if err != nil {
		return "", err
	}
	if cfg.BaseModel == "" {
		return "", fmt.Errorf("adapter %s: base_model_name_or_path is empty; name the base model directory", dir)
	}
	if filepath.IsAbs(cfg.BaseModel) {
		return cfg.BaseModel, nil
	}
	return filepath.Join(dir, cfg.BaseModel), nil
}

// OpenAdapter loads base model directory base (AdapterBase's when "") with the
// adapters of PEFT adapter directory dir on top, unmerged: the policy a LoRA run
// trained, at the base's cost plus 2·r·(in + out) flops per adapted projection and
// token.
func OpenAdapter(dir, base string) (*Model, *data.ModelDir, error) {
	return openAdapterAs(dir, base, PrecisionF32)
}

// openAdapterAs is OpenAdapter with the base in precision p.
func openAdapterAs(dir, base string, p Precision) (*Model, *data.ModelDir, error) {
	cfg, err := ReadAdapterConfig(dir)
	if err != nil {
		return nil, nil, err
	}
	if base, err = AdapterBase(dir, base); err != nil {
		return nil, nil, err
	}
	md, err := data.OpenModelDir(base)
	if err != nil {
		return nil, nil, fmt.Errorf("open adapter %s: base: %w", dir, err)
	}
	m, err := LoadModelAs(md.Config, md.Weights, p)
	if err != nil {
		md.Close()
		return nil, nil, fmt.Errorf("open adapter %s: base %s: %w", dir, base, err)
	}
	cfg.Dropout = 0 // a training-time option; the adapter computes the same without it
	if err := m.AddLoRA(cfg, 0); err != nil {
		md.Close()
		return nil, nil, fmt.Errorf("open adapter %s: %w", dir, err)
	}
	if err := LoadAdapter(m, dir); err != nil {
		md.Close()
		return nil, nil, fmt.Errorf("open adapter %s: %w", dir, err)
	}
	return m, md, nil
}

// openAdapterPolicy is OpenPolicy of an adapter directory.
func openAdapterPolicy(dir string, p Precision) (*Model, tokenizer.Tokenizer, *data.ModelConfig, error) {
	m, md, err := openAdapterAs(dir, "", p)
	if err != nil {
		return nil, nil, nil, err
	}
	defer md.Close()
	return m, md.Tokenizer, md.Config, nil
}

// WriteMerged writes the model directory of base + adapter directory dir merged,
// W + (α/r)·B·A in the base's torch_dtype, to out (which must not exist), with the
// base's config.json and tokenizer files: what `hindsight merge` makes. dir may be
// a checkpoint's step directory (its adapter/ is used). Durable: a temp directory
// beside out, every file fsynced, renamed into place, the parent fsynced.
func WriteMerged(backend backends.Backend, dir, base, out string) error {
	if !IsAdapterDir(dir) {
		if sub := filepath.Join(dir, checkpoint.AdapterDirName); IsAdapterDir(sub) {
			dir = sub
		} else {
			return fmt.Errorf("merge: %s is neither a PEFT adapter directory nor a checkpoint with %s/", dir, checkpoint.AdapterDirName)
		}
	}
	if _, err := os.Stat(out); err == nil {
		return fmt.Errorf("merge: %s exists", out)
	}
	m, md, err := OpenAdapter(dir, base)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	mc := md.Config
	md.Close()
	dtype := safetensors.DtypeF32
	switch mc.TorchDtype {
	case "bfloat16":
		dtype = safetensors.DtypeBF16
	case "float16":
		dtype = safetensors.DtypeF16
	}
	merged, err := mergedTensors(backend, m, dtype)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	baseDir, err := AdapterBase(dir, base)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	files, err := checkpoint.ModelFiles(baseDir)
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	parent := filepath.Dir(filepath.Clean(out))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-merge-*")
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	write := func() error {
		for n, b := range files {
			if err := fsutil.WriteFileBytes(filepath.Join(tmp, n), b, 0o644); err != nil {
				return err
			}
		}
		if err := safetensors.Write(filepath.Join(tmp, safetensors.FileName), merged, map[string]string{"format": "pt"}); err != nil {
			return err
		}
		if err := os.Chmod(tmp, 0o755); err != nil {
			return err
		}
		if err := fsutil.SyncDir(tmp); err != nil {
			return err
		}
		return fsutil.RenameNoReplace(tmp, out) // fsyncs both directories
	}
	if err := write(); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("merge %s: %w", out, err)
	}
	return nil
}
