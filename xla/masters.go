package xla

import (
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// masterForm is how a Trainer keeps the float32 masters of its trained weights.
type masterForm int

const (
	// noMasters: the trained weights are float32 themselves (f32, LoRA's adapters).
	noMasters masterForm = iota
	// wholeMasters: a float32 copy beside the bfloat16 weights, 4 bytes a
	// parameter (a backend without Bitcast: the pure-Go one).
	wholeMasters
	// splitMasters: each master is its bfloat16 weight (the model's variable) and a
	// 16-bit remainder, 2 bytes a parameter beside the weight (splitMaster).
	splitMasters
)

// canSplitMasters says whether backend has the bit operations splitMaster and
// joinMaster use (XLA does; the pure-Go backend v0.26.0 has no Bitcast or shifts).
func canSplitMasters(backend backends.Backend) bool {
	ops := backend.Capabilities().Operations
	for _, op := range []backends.OpType{backends.OpTypeBitcast, backends.OpTypeShiftLeft, backends.OpTypeShiftRightLogical,
		backends.OpTypeBitwiseAnd, backends.OpTypeBitwiseOr} {
		if !ops[op] {
			return false
		}
	}
	return true
}

// splitMaster splits float32 masters p into the bfloat16 weight the policy runs
// with and the 16-bit remainder that, with it, gives p back bit for bit
// (joinMaster): the remainder is the low 16 bits of p, and the weight is p's high
// 16 bits rounded to nearest by those low bits (ties away from zero: +0x8000 on
// the bit pattern, then the high half). Round to nearest even cannot be used:
// at a tie it sends two masters (either side of the tie) to the same even
// weight with the same low bits, so 16 bits could not tell them apart; ties
// away from zero differ from it only at an exact tie (low bits 0x8000), by one
// bfloat16 step.
//
//	p: float32 [...] → weight bfloat16 [...], remainder uint16 [...]
func splitMaster(p *Node) (hi, lo *Node) {
	g := p.Graph()
	bits := Bitcast(p, dtypes.Uint32)
	lo = ConvertDType(BitwiseAnd(bits, Scalar(g, dtypes.Uint32, 0xFFFF)), dtypes.Uint16)
	top := BitwiseShiftRightLogicalScalar(Add(bits, Scalar(g, dtypes.Uint32, 0x8000)), 16)
	return Bitcast(ConvertDType(top, dtypes.Uint16), dtypes.BFloat16), lo
}

// joinMaster is the float32 master of a bfloat16 weight hi and its remainder lo
// (splitMaster): the bit pattern (hi − lo>>15) << 16 | lo, modulo 2³², where
// lo>>15 undoes the rounding up.
//
//	hi: bfloat16 [...], lo: uint16 [...] → float32 [...]
func joinMaster(hi, lo *Node) *Node {
	h := ConvertDType(Bitcast(hi, dtypes.Uint16), dtypes.Uint32)
	l := ConvertDType(lo, dtypes.Uint32)
	top := Sub(h, BitwiseShiftRightLogicalScalar(l, 15))
	return Bitcast(BitwiseOr(BitwiseShiftLeftScalar(top, 16), l), dtypes.Float32)
}

// joinBits is joinMaster on the host, for one value.
func joinBits(hi bfloat16.BFloat16, lo uint16) uint32 {
	return (uint32(hi.Bits())-uint32(lo>>15))<<16 | uint32(lo)
}

// masterWeights are a bfloat16 Trainer's float32 master weights of its trained
// variables, on the device: AdamW updates the masters, and after each update the
// model's bfloat16 variables are their rounding. Under splitMasters a master is
// its variable and a remainder (lo); under wholeMasters a float32 tensor (vals).
type masterWeights struct {
	form masterForm
	vals []*tensors.Tensor // wholeMasters: one per trained variable, float32
	lo   []*tensors.Tensor // splitMasters: one per trained variable, uint16
	// narrow makes float32 masters into bfloat16 weights (wholeMasters), or into
	// the weights then the remainders (splitMasters); join, under splitMasters, the
	// float32 masters of the weights then the remainders.
	narrow, join *Exec
}

// newMasterWeights makes the masters of vars (bfloat16) on backend: they are
// vars widened, so the policy the trainer starts from is the one it runs.
func newMasterWeights(backend backends.Backend, vars []*mlctx.Variable) (*masterWeights, error) {
	mw := &masterWeights{form: wholeMasters}
	if canSplitMasters(backend) {
		mw.form = splitMasters
	}
	var err error
	if mw.narrow, err = NewExec(backend, func(in []*Node) []*Node {
		out := make([]*Node, len(in))
		var los []*Node
		for i, x := range in {
			if mw.form == splitMasters {
				var lo *Node
				out[i], lo = splitMaster(x)
				los = append(los, lo)
			} else {
				out[i] = convert(x, dtypes.BFloat16)
			}
		}
		return append(out, los...)
	}); err != nil {
		return nil, fmt.Errorf("master weights: %w", err)
	}
	mw.narrow.SetMaxCache(-1)
	args := make([]any, len(vars))
	for i, v := range vars {
		args[i] = v.MustValue()
	}
	if mw.form == splitMasters {
		if mw.join, err = NewExec(backend, func(in []*Node) []*Node {
			n := len(in) / 2
			out := make([]*Node, n)
			for i := range n {
				out[i] = joinMaster(in[i], in[n+i])
			}
			return out
		}); err != nil {
			return nil, fmt.Errorf("master weights: %w", err)
		}
		mw.join.SetMaxCache(-1)
		// A bfloat16 weight widened has zero low bits: its remainder is 0.
		zeros, err := NewExec(backend, func(in []*Node) []*Node {
			out := make([]*Node, len(in))
			for i, x := range in {
				out[i] = ZerosLike(Bitcast(x, dtypes.Uint16))
			}
			return out
		})
		if err != nil {
			return nil, fmt.Errorf("master weights: %w", err)
		}
		defer zeros.Finalize()
		if mw.lo, err = zeros.Exec(args...); err != nil {
			return nil, fmt.Errorf("master weights: %w", err)
		}
		return mw, nil
	}
	widen, err := NewExec(backend, func(in []*Node) []*Node {
		out := make([]*Node, len(in))
		for i, x := range in {
			out[i] = ConvertDType(x, dtypes.Float32)
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("master weights: %w", err)
	}
	defer widen.Finalize()
	if mw.vals, err = widen.Exec(args...); err != nil {
		return nil, fmt.Errorf("master weights: %w", err)
	}
	return mw, nil
}

// set makes vals (float32) the masters and sets vars to their bfloat16 rounding,
// freeing what they replace; vals are kept (wholeMasters) or freed once split.
func (mw *masterWeights) set(vals []*tensors.Tensor, vars []*mlctx.Variable) error {
	low, err := mw.narrow.Exec(anys(vals)...)
	if err != nil {
		return fmt.Errorf("refresh bf16 weights: %w", err)
	}
	if mw.form == splitMasters {
		n := len(vals)
		finalize(vals)
		finalize(mw.lo)
		low, mw.lo = low[:n], low[n:]
	} else {
		for i, t := range mw.vals {
			if t != vals[i] {
				t.FinalizeAll()
			}
		}
		mw.vals = vals
	}
	for i, v := range vars {
		old := v.MustValue()
		if err := v.SetValue(low[i]); err != nil {
			return fmt.Errorf("refresh bf16 weights: %s: %w", v.ScopeAndName(), err)
		}
		old.FinalizeAll()
	}
	return nil
}

// float32s are the masters as float32 tensors on the device: vals themselves
// (wholeMasters, still owned by mw), or joined from vars and the remainders (new
// tensors the caller owns).
func (mw *masterWeights) float32s(vars []*mlctx.Variable) ([]*tensors.Tensor, error) {
	if mw.form != splitMasters {
		return mw.vals, nil
	}
	args := make([]any, 0, 2*len(vars))
	for _, v := range vars {
		args = append(args, v.MustValue())
	}
	args = append(args, anys(mw.lo)...)
	out, err := mw.join.Exec(args...)
	if err != nil {
		return nil, fmt.Errorf("master weights: %w", err)
	}
	return out, nil
}

// hostValues is master i on the host: a whole master copied, or a split one
// joined from its variable v and remainder (joinBits).
func (mw *masterWeights) hostValues(i int, v *mlctx.Variable) []float32 {
	if mw.form != splitMasters {
		return float32sOf(mw.vals[i])
	}
	out := make([]float32, v.Shape().Size())
	his := make([]bfloat16.BFloat16, len(out))
	tensors.MustConstFlatData(v.MustValue(), func(flat []bfloat16.BFloat16) { copy(his, flat) })
	tensors.MustConstFlatData(mw.lo[i], func(flat []uint16) {
		for k, lo := range flat {
			out[k] = math.Float32frombits(joinBits(his[k], lo))
		}
	})
	return out
}

// bytesPerParameter is what the masters hold beyond the bfloat16 weights.
func (mw *masterWeights) bytesPerParameter() int64 {
	if mw.form == splitMasters {
		return 2
	}
	return 4
}

// newMasters returns the float32 masters of a bfloat16 model's trained variables
// vars, or nil when they are float32 already (f32, or LoRA's adapters). It places
// m's weights on backend first (Model.place): the masters' programs take the
// variables as inputs, and an input that is a host tensor moves to the device
// without its host copy going back to the OS, so the loaded weights (1.1 GiB at
// the qwen3-0.6b shape in bf16) stayed resident as Go garbage through Prepare and
// the first step (docs/performance.md "Training-step memory").
func newMasters(backend backends.Backend, m *Model, vars []*mlctx.Variable) (*masterWeights, error) {
	for _, v := range vars {
		if v.Shape().DType != dtypes.Float32 {
			if err := m.place(backend); err != nil {
				return nil, fmt.Errorf("master weights: %w", err)
			}
			return newMasterWeights(backend, vars)
		}
	}
	return nil, nil
}

// form is how tr keeps its masters.
func (tr *Trainer) form() masterForm {
	if tr.masters == nil {
		return noMasters
	}
	return tr.masters.form
}

// updated are the float32 tensors AdamW updates as one program (apply): the
// masters, or the trained variables themselves. owned says whether they are
// new tensors (split masters joined) the caller frees once used.
func (tr *Trainer) updated() (params []*tensors.Tensor, owned bool, err error) {
	if tr.masters != nil {
		params, err = tr.masters.float32s(tr.grad.params)
		return params, tr.masters.form == splitMasters, err
	}
	params = make([]*tensors.Tensor, len(tr.grad.params))
	for i, v := range tr.grad.params {
		params[i] = v.MustValue()
	}
	return params, false, nil
}

// groupInputs are the per-parameter inputs of the grouped update (applyGroups):
// the float32 trained weights (f32), the float32 masters (wholeMasters), or the
// bfloat16 weights with the remainders as lo (splitMasters).
func (tr *Trainer) groupInputs() (params, lo []*tensors.Tensor) {
	if tr.form() == wholeMasters {
		return tr.masters.vals, nil
	}
	params = make([]*tensors.Tensor, len(tr.grad.params))
	for i, v := range tr.grad.params {
		params[i] = v.MustValue()
	}
	if tr.form() == splitMasters {
		lo = tr.masters.lo
	}
	return params, lo
}

// setUpdated makes vals (float32, AdamW's output) the trained weights: the masters
// and their bfloat16 copy in the model, or the variables themselves.
func (tr *Trainer) setUpdated(vals []*tensors.Tensor) error {
	if tr.masters != nil {
		return tr.masters.set(vals, tr.grad.params)
	}
	for i, v := range tr.grad.params {
		if err := v.SetValue(vals[i]); err != nil {
			return fmt.Errorf("set %s: %w", v.ScopeAndName(), err)
		}
	}
	return nil
}

// setOne takes the grouped update's output for trained parameter i, freeing what
// it replaces: under f32, p is the new float32 weight; under wholeMasters, p the
// new master and low its bfloat16 rounding (the variable's new value); under
// splitMasters, p the new remainder and low the new bfloat16 weight.
func (tr *Trainer) setOne(i int, p, low *tensors.Tensor) error {
	v := tr.grad.params[i]
	switch tr.form() {
	case wholeMasters:
		if old := tr.masters.vals[i]; old != p {
			old.FinalizeAll()
		}
		tr.masters.vals[i] = p
		p = low
	case splitMasters:
		tr.masters.lo[i].FinalizeAll()
		tr.masters.lo[i] = p
		p = low
	}
	if err := v.SetValue(p); err != nil { // frees the old value
		return fmt.Errorf("set %s: %w", v.ScopeAndName(), err)
	}
	return nil
}

// masterTensors are the masters under HF names with prefix, to be written in dtype.
func (tr *Trainer) masterTensors(prefix string, dtype safetensors.Dtype) []safetensors.NamedTensor {
	out := make([]safetensors.NamedTensor, len(tr.grad.params))
	for i, v := range tr.grad.params {
		out[i] = safetensors.NamedTensor{Name: prefix + HFName(v.Scope(), v.Name()), Dtype: dtype, Shape: v.Shape().Dimensions,
			Values: tr.masters.hostValues(i, v)}
	}
	return out
}
