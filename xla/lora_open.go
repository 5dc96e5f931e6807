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

// openAdapter is Open of PEFT adapter directory dir: base model directory o.Base
// (AdapterBase's when "") in o.Precision with the adapters on top.
func openAdapter(dir string, o OpenOptions) (*Model, error) {
	cfg, err := ReadAdapterConfig(dir)
	if err != nil {
		return nil, err
	}
	base, err := AdapterBase(dir, o.Base)
	if err != nil {
		return nil, err
	}
	md, err := data.OpenModelDirWith(base, o.Tokenizer)
	if err != nil {
		return nil, fmt.Errorf("open adapter %s: base: %w", dir, err)
	}
	defer md.Close()
	m, err := Load(md.Config, md.Weights, o.Precision)
	if err != nil {
		return nil, fmt.Errorf("open adapter %s: base %s: %w", dir, base, err)
	}
	m.tok = md.Tokenizer
	cfg.Dropout = 0 // a training-time option; the adapter computes the same without it
	if err := m.AddLoRA(cfg, 0); err != nil {
		return nil, fmt.Errorf("open adapter %s: %w", dir, err)
	}
	if err := loadAdapter(m, dir); err != nil {
		return nil, fmt.Errorf("open adapter %s: %w", dir, err)
	}
	return m, nil
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
	m, err := openAdapter(dir, OpenOptions{Base: base})
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	mc := m.HFConfig()
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
