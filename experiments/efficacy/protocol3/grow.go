package protocol3

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// GrowLayers writes to dir the llama model of from with layers decoder layers (more
// than it has), grown function-preservingly (protocol 3, attempt 4): the model's own
// layers keep their weights and come first; each new layer is appended after them
// with fresh weights (data.InitWeights of the grown config, seed), its norms at 1 and
// its attention output projection (o_proj) and MLP down projection (down_proj) at
// zero. A layer whose two residual branches write zeros passes its input through, so
// the grown model computes exactly what the model of from does; training moves o_proj
// and down_proj first (their gradients are the branches' non-zero activations), and
// the other new weights follow. Every other file of from (tokenizer, generation
// config) is copied; config.json says the new depth. dir appears complete or not at
// all.
func GrowLayers(from, dir string, layers int, seed uint64) error {
	raw, err := os.ReadFile(filepath.Join(from, data.ConfigFileName))
	if err != nil {
		return fmt.Errorf("grow layers: %w", err)
	}
	cfg, err := data.ParseModelConfig(raw)
	if err != nil {
		return fmt.Errorf("grow layers %s: %w", from, err)
	}
	old := cfg.NumHiddenLayers
	if layers <= old {
		return fmt.Errorf("grow layers %s: %d layers asked, the model has %d: want more", from, layers, old)
	}
	cfg.NumHiddenLayers = layers
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("grow layers %s: %w", from, err)
	}
	fresh, err := data.InitWeights(cfg, seed)
	if err != nil {
		return fmt.Errorf("grow layers %s: %w", from, err)
	}
	st, err := safetensors.OpenDir(from)
	if err != nil {
		return fmt.Errorf("grow layers: %w", err)
	}
	defer st.Close()
	have := map[string]bool{}
	for _, n := range st.Names() {
		have[n] = true
	}
	out := make([]safetensors.NamedTensor, 0, len(fresh))
	for _, t := range fresh {
		layer, isNew := newLayer(t.Name, old)
		switch {
		case isNew:
			if strings.HasSuffix(t.Name, ".self_attn.o_proj.weight") || strings.HasSuffix(t.Name, ".mlp.down_proj.weight") {
				if !t.Dtype.IsFloat() {
					return fmt.Errorf("grow layers %s: layer %d tensor %s: dtype %s, want a float", from, layer, t.Name, t.Dtype)
				}
				t.Values = make([]float32, len(t.Values))
			}
			out = append(out, t)
		case !have[t.Name]:
			return fmt.Errorf("grow layers %s: tensor %s missing", from, t.Name)
		default:
			v, err := st.Tensor(t.Name)
			if err != nil {
				return fmt.Errorf("grow layers %s: %w", from, err)
			}
			if !slices.Equal(v.Shape, t.Shape) {
				return fmt.Errorf("grow layers %s: tensor %s has shape %v, the config says %v", from, t.Name, v.Shape, t.Shape)
			}
			out = append(out, safetensors.NamedTensor{Name: v.Name, Dtype: v.Dtype, Shape: v.Shape, Raw: append([]byte(nil), v.Data...)})
			delete(have, t.Name)
		}
	}
	for n := range have {
		return fmt.Errorf("grow layers %s: tensor %s is not in a %d-layer llama", from, n, layers)
	}
	files, err := checkpoint.ModelFiles(from)
	if err != nil {
		return fmt.Errorf("grow layers: %w", err)
	}
	err = efficacy.ReplaceDir(dir, func(tmp string) error {
		for name, b := range files {
			if name == data.ConfigFileName {
				continue
			}
			if err := fsutil.WriteFileBytes(filepath.Join(tmp, name), b, 0o644); err != nil {
				return err
			}
		}
		if err := data.WriteModelConfig(filepath.Join(tmp, data.ConfigFileName), cfg); err != nil {
			return err
		}
		meta := map[string]string{"format": "pt", "hindsight.grown": fmt.Sprintf("from %d to %d layers, seed %d", old, layers, seed)}
		return safetensors.Write(filepath.Join(tmp, safetensors.FileName), out, meta)
	})
	if err != nil {
		return fmt.Errorf("grow layers: %w", err)
	}
	return nil
}

// newLayer reports the layer index of a "model.layers.N." tensor name and whether N
// is at least old (a layer GrowLayers adds).
func newLayer(name string, old int) (int, bool) {
	var n int
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return 0, false
	}
	if _, err := fmt.Sscanf(rest, "%d.", &n); err != nil {
		return 0, false
	}
	return n, n >= old
}
