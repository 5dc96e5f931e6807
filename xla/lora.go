package xla

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// LoRA (Hu et al. 2021) as PEFT implements it: a frozen projection W [out, in] gets
// a trained low-rank update, y = x·Wᵀ + (α/r)·(x·Aᵀ)·Bᵀ, with A [r, in] and
// B [out, r] in float32. B starts at zero (the policy starts as the base model)
// and A from PEFT's kaiming_uniform_(a=√5), i.e. uniform(−1/√in, 1/√in). The
// adapters are variables lora_A and lora_B in the scope of the projection they
// adapt ("/model/layers/3/self_attn/q_proj"), so linear finds them there and the
// checkpoint names follow the HF module names.

// LoRAConfig is `train.lora`: rank 0 (the default) trains every weight.
type LoRAConfig struct {
	// Rank is r, the inner dimension of the adapters; 0 turns LoRA off.
	Rank int `yaml:"rank"`
	// Alpha is lora_alpha: the update is scaled by Alpha/Rank (PEFT's default
	// scaling; rsLoRA's α/√r is not offered).
	Alpha float64 `yaml:"alpha"`
	// Dropout is lora_dropout. Only 0 is accepted: the compiled training pass has no
	// per-step random mask, and the scoring passes whose log-probs the credit uses
	// must see the same function as the gradient pass.
	Dropout float64 `yaml:"dropout"`
	// Targets are the HF module names adapted in every layer: q_proj, k_proj,
	// v_proj, o_proj, gate_proj, up_proj, down_proj.
	Targets []string `yaml:"targets"`
	// BaseModel is written as base_model_name_or_path in adapter_config.json (the
	// daemon sets the model directory); not part of the YAML.
	BaseModel string `yaml:"-"`
}

// LoRATargets are the modules LoRA may adapt, by HF module name, with the scope
// under a layer that holds them.
var LoRATargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}

// DefaultLoRATargets adapts every projection of every layer (as the memory model
// and most RL recipes assume).
func DefaultLoRATargets() []string { return slices.Clone(LoRATargets) }

// Enabled reports whether LoRA is on (rank > 0).
func (c LoRAConfig) Enabled() bool { return c.Rank > 0 }

// Scale is α/r.
func (c LoRAConfig) Scale() float64 { return c.Alpha / float64(c.Rank) }

// Validate names the first bad field (without the `train.lora.` prefix). A zero
// config (LoRA off) is valid.
func (c LoRAConfig) Validate() error {
	if c.Rank == 0 && c.Alpha == 0 && c.Dropout == 0 {
		return nil
	}
	switch {
	case c.Rank <= 0:
		return fmt.Errorf("rank: %d, want a positive integer (or leave train.lora out to train every weight)", c.Rank)
	case !(c.Alpha > 0) || math.IsInf(c.Alpha, 0):
		return fmt.Errorf("alpha: %g, want a positive number (the update is scaled by alpha/rank)", c.Alpha)
	case c.Dropout < 0 || c.Dropout >= 1 || math.IsNaN(c.Dropout):
		return fmt.Errorf("dropout: %g, want 0", c.Dropout)
	case c.Dropout != 0:
		return fmt.Errorf("dropout: %g is not supported, want 0: the compiled training pass has no per-step dropout mask, and the scoring passes the credit uses must compute the same function as the gradient pass", c.Dropout)
	case len(c.Targets) == 0:
		return fmt.Errorf("targets: empty, want some of %s", strings.Join(LoRATargets, ", "))
	}
	seen := map[string]bool{}
	for i, t := range c.Targets {
		if !slices.Contains(LoRATargets, t) {
			return fmt.Errorf("targets[%d]: %q is not a module LoRA can adapt, want one of %s", i, t, strings.Join(LoRATargets, ", "))
		}
		if seen[t] {
			return fmt.Errorf("targets[%d]: %q is listed twice", i, t)
		}
		seen[t] = true
	}
	return nil
}

// loraScaleParam is the context parameter (at the root) holding α/r of a model with
// adapters; linear reads it while building a graph.
const loraScaleParam = "hindsight_lora_scale"

// loraModule is one adapted projection: its scope and its W's shape [out, in].
type loraModule struct {
	Layer   int
	Target  string
	Scope   string // "/model/layers/3/self_attn/q_proj"
	Out, In int
}

// HFModule is the module's HF name: "model.layers.3.self_attn.q_proj".
func (m loraModule) HFModule() string {
	return strings.ReplaceAll(strings.TrimPrefix(m.Scope, "/"), "/", ".")
}

// targetParent is the module under a layer that holds each target.
func targetParent(target string) string {
	switch target {
	case "gate_proj", "up_proj", "down_proj":
		return "mlp"
	}
	return "self_attn"
}

// loraModules lists the adapted projections of c for targets, layer by layer in
// LoRATargets order (the order of the adapter variables and files).
func loraModules(c Config, targets []string) []loraModule {
	q, kv := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	d, inter := c.HiddenSize, c.IntermediateSize
	shape := map[string][2]int{
		"q_proj": {q, d}, "k_proj": {kv, d}, "v_proj": {kv, d}, "o_proj": {d, q},
		"gate_proj": {inter, d}, "up_proj": {inter, d}, "down_proj": {d, inter},
	}
	var out []loraModule
	for i := range c.NumHiddenLayers {
		for _, t := range LoRATargets {
			if !slices.Contains(targets, t) {
				continue
			}
			s := shape[t]
			out = append(out, loraModule{Layer: i, Target: t, Out: s[0], In: s[1],
				Scope: "/model/layers/" + strconv.Itoa(i) + "/" + targetParent(t) + "/" + t})
		}
	}
	return out
}

// LoRA returns the model's adapter config, or nil when every weight is its own.
func (m *Model) LoRA() *LoRAConfig { return m.lora }

// AddLoRA gives m fresh adapters of cfg on every target projection: B zero, A
// uniform(−1/√in, 1/√in) drawn from a stream seeded by seed and the tensor's name.
// It must run before any executable over m is built.
func (m *Model) AddLoRA(cfg LoRAConfig, seed uint64) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("add lora: %w", err)
	}
	if !cfg.Enabled() {
		return errors.New("add lora: rank 0")
	}
	if m.lora != nil {
		return errors.New("add lora: the model has adapters already")
	}
	for _, mod := range loraModules(m.Config, cfg.Targets) {
		if v := m.ctx.GetVariableByScopeAndName(mod.Scope, "weight"); v == nil || !slices.Equal(v.Shape().Dimensions, []int{mod.Out, mod.In}) {
			return fmt.Errorf("add lora: %s.weight is not a [%d, %d] weight of the model", mod.HFModule(), mod.Out, mod.In)
		}
		h := fnv.New64a()
		h.Write([]byte(mod.HFModule() + ".lora_A"))
		rng := rand.New(rand.NewPCG(seed, h.Sum64()))
		bound := 1 / math.Sqrt(float64(mod.In))
		a := make([]float32, cfg.Rank*mod.In)
		for i := range a {
			a[i] = float32(bound * (2*rng.Float64() - 1))
		}
		sc := m.ctx.InAbsPath(mod.Scope)
		sc.VariableWithValue("lora_A", tensors.FromFlatDataAndDimensions(a, cfg.Rank, mod.In))
		sc.VariableWithValue("lora_B", tensors.FromFlatDataAndDimensions(make([]float32, mod.Out*cfg.Rank), mod.Out, cfg.Rank))
	}
	c := cfg
	c.Targets = slices.Clone(cfg.Targets)
	m.lora = &c
	m.ctx.InAbsPath("/").SetParam(loraScaleParam, cfg.Scale())
	return nil
}

// loraAdd returns y + (α/r)·(x·Aᵀ)·Bᵀ when ctx's scope holds adapters, else y:
// the hook linear calls. The rank-r product is taken first, so the update costs
// 2·r·(in + out) flops per position rather than in·out.
//
//	x: [batch, seq, in]; y: [batch, seq, out] → [batch, seq, out]
func loraAdd(ctx *mlctx.Context, x, y *Node) *Node {
	g := x.Graph()
	a := boundWeight(g, ctx.Scope(), "lora_A") // [r, in]: a layer program's input
	if a == nil {
		av := ctx.GetVariableByScopeAndName(ctx.Scope(), "lora_A")
		if av == nil {
			return y
		}
		a = av.ValueGraph(g)
	}
	b := weight(ctx, g, "lora_B") // [out, r]
	scale := mlctx.GetParamOr(ctx, loraScaleParam, 0.0)
	// The adapters are float32 on a bfloat16 base too: x widened, the update added
	// to the widened product and the sum rounded back to y's dtype.
	xa := MulScalar(dot(widen(x), []int{2}, nil, a, []int{1}, nil), scale)             // [batch, seq, r], scaled where it is smallest
	return convert(Add(widen(y), dot(xa, []int{2}, nil, b, []int{1}, nil)), y.DType()) // + [batch, seq, out]
}

// isAdapter says whether v is a LoRA adapter variable.
func isAdapter(v *mlctx.Variable) bool { return v.Name() == "lora_A" || v.Name() == "lora_B" }

// trainables lists the variables training updates, in context order: the
// adapters of a LoRA model, else every weight.
func trainables(m *Model) []*mlctx.Variable {
	var out []*mlctx.Variable
	for v := range m.ctx.IterVariables() {
		if m.lora == nil || isAdapter(v) {
			out = append(out, v)
		}
	}
	return out
}

// baseVariables lists the variables of the base model (every one but the
// adapters), in context order.
func baseVariables(m *Model) []*mlctx.Variable {
	var out []*mlctx.Variable
	for v := range m.ctx.IterVariables() {
		if !isAdapter(v) {
			out = append(out, v)
		}
	}
	return out
}

// baseView returns the base model of a LoRA model with the adapters off: a model
// over the same base tensors (not copied; they are frozen) without the adapters.
func baseView(m *Model) *Model {
	ctx := mlctx.New()
	for _, v := range baseVariables(m) {
		ctx.InAbsPath(v.Scope()).VariableWithValue(v.Name(), v.MustValue())
	}
	return &Model{Config: m.Config, ctx: ctx}
}

// cloneLoRA returns a model that shares m's frozen base tensors and holds copies
// of its adapters (the frozen or EMA teacher of a LoRA run).
func cloneLoRA(m *Model) *Model {
	ctx := mlctx.New()
	for v := range m.ctx.IterVariables() {
		t := v.MustValue()
		if isAdapter(v) {
			t = hostCopy(t)
		}
		ctx.InAbsPath(v.Scope()).VariableWithValue(v.Name(), t)
	}
	c := *m.lora
	ctx.InAbsPath("/").SetParam(loraScaleParam, c.Scale())
	return &Model{Config: m.Config, ctx: ctx, lora: &c}
}

// setupLoRA gives m fresh adapters of cfg when cfg is on and m has none; a model
// that has adapters already (loadAdapter) must have cfg's rank, alpha and targets.
func setupLoRA(m *Model, cfg LoRAConfig, seed uint64) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("lora: %w", err)
	}
	switch {
	case !cfg.Enabled():
		return nil
	case m.lora == nil:
		return m.AddLoRA(cfg, seed)
	case m.lora.Rank != cfg.Rank || m.lora.Alpha != cfg.Alpha || !slices.Equal(m.lora.Targets, cfg.Targets):
		return fmt.Errorf("lora: the model's adapters have rank %d, alpha %g, targets %v; the config says rank %d, alpha %g, targets %v",
			m.lora.Rank, m.lora.Alpha, m.lora.Targets, cfg.Rank, cfg.Alpha, cfg.Targets)
	}
	return nil
}
