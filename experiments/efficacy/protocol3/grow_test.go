package protocol3

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/xla"
)

// attempt3Model is protocol 3's attempt-3 warm start (committed), the model attempt 4
// grows.
const attempt3Model = "../../../bench/efficacy/protocol3/attempt3/model"

// TestGrowLayersPreservesTheModel grows attempt 3's 2-layer warm start to 4 layers and
// checks that the grown model scores 8 demonstration episodes exactly as the original
// does (every token's log-prob within 1e-6 nats), that the old layers are copied byte
// for byte, and that the new layers are really computed: their other weights are
// fresh (non-zero), only o_proj and down_proj are zero. A grown model with a non-zero
// o_proj is checked to score differently, so the comparison can fail.
func TestGrowLayersPreservesTheModel(t *testing.T) {
	backend, err := xla.NewBackend(xla.ResolveBackend(xla.DefaultBackend, ""))
	require.NoError(t, err)
	grown := filepath.Join(t.TempDir(), "grown")
	require.NoError(t, GrowLayers(attempt3Model, grown, 4, 4))

	raw, err := os.ReadFile(filepath.Join(grown, data.ConfigFileName))
	require.NoError(t, err)
	cfg, err := data.ParseModelConfig(raw)
	require.NoError(t, err)
	require.Equal(t, 4, cfg.NumHiddenLayers)
	require.Equal(t, 128, cfg.HiddenSize)

	a, err := safetensors.OpenDir(attempt3Model)
	require.NoError(t, err)
	defer a.Close()
	g, err := safetensors.OpenDir(grown)
	require.NoError(t, err)
	defer g.Close()
	for _, n := range a.Names() {
		va, err := a.Tensor(n)
		require.NoError(t, err)
		vg, err := g.Tensor(n)
		require.NoError(t, err, n)
		require.Equal(t, va.Data, vg.Data, n)
	}
	nonZero := func(n string) bool {
		v, err := g.Tensor(n)
		require.NoError(t, err, n)
		f, err := v.Float32s()
		require.NoError(t, err, n)
		for _, x := range f {
			if x != 0 {
				return true
			}
		}
		return false
	}
	for _, l := range []string{"model.layers.2.", "model.layers.3."} {
		require.False(t, nonZero(l+"self_attn.o_proj.weight"), l)
		require.False(t, nonZero(l+"mlp.down_proj.weight"), l)
		for _, n := range []string{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight", "input_layernorm.weight"} {
			require.True(t, nonZero(l+n), l+n)
		}
	}

	orig, err := efficacy.OpenPolicy(backend, attempt3Model)
	require.NoError(t, err)
	big, err := efficacy.OpenPolicy(backend, grown)
	require.NoError(t, err)
	demos, _, err := Demos(orig.Tok, 8, DefaultDemo(), 512, 12, 4)
	require.NoError(t, err)
	require.NotEmpty(t, demos)
	so, err := xla.NewScorer(backend, orig.Model, xla.ScorerOptions{})
	require.NoError(t, err)
	sg, err := xla.NewScorer(backend, big.Model, xla.ScorerOptions{})
	require.NoError(t, err)
	maxDiff := func(s *xla.Scorer) float64 {
		worst := 0.0
		for _, d := range demos {
			lo, co, err := so.Score(t.Context(), d.Tokens)
			require.NoError(t, err)
			co.Close()
			lg, cg, err := s.Score(t.Context(), d.Tokens)
			require.NoError(t, err)
			cg.Close()
			require.Len(t, lg, len(lo))
			for i := 1; i < len(lo); i++ {
				worst = max(worst, math.Abs(float64(lo[i])-float64(lg[i])))
			}
		}
		return worst
	}
	d := maxDiff(sg)
	t.Logf("grown 2 → 4 layers: max |Δ log-prob| %.3g nats over %d episodes", d, len(demos))
	require.LessOrEqual(t, d, 1e-6)

	// The control: the same growth with layer 2's o_proj left at its fresh weights
	// changes the scores.
	ctl := filepath.Join(t.TempDir(), "control")
	require.NoError(t, GrowLayers(attempt3Model, ctl, 4, 4))
	cfgCtl := *cfg
	fresh, err := data.InitWeights(&cfgCtl, 4)
	require.NoError(t, err)
	c, err := safetensors.OpenDir(ctl)
	require.NoError(t, err)
	var ts []safetensors.NamedTensor
	for _, n := range c.Names() {
		v, err := c.Tensor(n)
		require.NoError(t, err)
		ts = append(ts, safetensors.NamedTensor{Name: n, Dtype: v.Dtype, Shape: v.Shape, Raw: append([]byte(nil), v.Data...)})
	}
	require.NoError(t, c.Close())
	for i := range ts {
		if ts[i].Name == "model.layers.2.self_attn.o_proj.weight" {
			for _, f := range fresh {
				if f.Name == ts[i].Name {
					ts[i].Raw, ts[i].Values = nil, f.Values
				}
			}
		}
	}
	require.NoError(t, safetensors.Write(filepath.Join(ctl, safetensors.FileName), ts, nil))
	pc, err := efficacy.OpenPolicy(backend, ctl)
	require.NoError(t, err)
	sc, err := xla.NewScorer(backend, pc.Model, xla.ScorerOptions{})
	require.NoError(t, err)
	dc := maxDiff(sc)
	t.Logf("control (layer 2's o_proj not zeroed): max |Δ log-prob| %.3g nats", dc)
	require.Greater(t, dc, 1e-4)

	require.ErrorContains(t, GrowLayers(attempt3Model, filepath.Join(t.TempDir(), "x"), 2, 4), "want more")
}
