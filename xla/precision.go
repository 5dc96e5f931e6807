package xla

import (
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/dtypes/bfloat16"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// Precision is the dtype a Model's weights live in on the device, and so the dtype
// of its matrix products (docs/training.md "Precision"):
//
//   - f32 (the default): every weight and every activation in float32;
//   - bf16: the weights in bfloat16 (half the memory) and the activations between
//     the norms in bfloat16, as torch.autocast("cpu", dtype=torch.bfloat16) leaves
//     them: each matrix product takes bfloat16 operands (the activation is rounded
//     on the way in) and gives a bfloat16 result (the projections, the MLP's gate,
//     up and down and its SiLU product, the attention's queries and output); the
//     residual stream, RMSNorm, RoPE, the attention's scores and softmax, the
//     logits' log-softmax, the credit math and the loss stay float32; the KV cache
//     is bfloat16. Training keeps float32 master weights and AdamW moments
//     (Trainer; on XLA a master is its bfloat16 weight and a 16-bit remainder,
//     masters.go) and refreshes the bfloat16 weights from the masters after each
//     update; gradients are summed in float32. LoRA adapters stay float32 on a
//     bfloat16 base.
type Precision string

const (
	PrecisionF32  Precision = "f32"
	PrecisionBF16 Precision = "bf16"
)

// Validate names a precision that is neither f32 nor bf16 ("" is f32).
func (p Precision) Validate() error {
	switch p {
	case "", PrecisionF32, PrecisionBF16:
		return nil
	}
	return fmt.Errorf("%q, want f32 or bf16", string(p))
}

// DType is the weights' dtype under p.
func (p Precision) DType() dtypes.DType {
	if p == PrecisionBF16 {
		return dtypes.BFloat16
	}
	return dtypes.Float32
}

// CheckBackend says whether backend can run a model in precision p: bf16 needs a
// backend with bfloat16 dot products.
func (p Precision) CheckBackend(backend backends.Backend) error {
	if p != PrecisionBF16 {
		return nil
	}
	if !backend.Capabilities().DTypes[dtypes.BFloat16] {
		return fmt.Errorf("precision bf16: backend %s has no bfloat16; use an XLA backend (xla-cpu, cuda) or precision f32", backend.Name())
	}
	return nil
}

// Precision is the precision m's weights were loaded in.
func (m *Model) Precision() Precision {
	if m.precision == "" {
		return PrecisionF32
	}
	return m.precision
}

// cacheDType is the dtype of m's KV cache: the weights'.
func (m *Model) cacheDType() dtypes.DType { return m.Precision().DType() }

// weightTensor makes a weight tensor of dtype dt from a checkpoint's view. A BF16
// view becomes a bfloat16 tensor bit for bit (not widened); anything else is read
// as float32 and, for bfloat16, rounded to nearest even (as PyTorch's .to()).
func weightTensor(v safetensors.TensorView, dt dtypes.DType) (*tensors.Tensor, error) {
	if dt == dtypes.BFloat16 && v.Dtype == safetensors.DtypeBF16 {
		t := tensors.FromShape(shapes.Make(dt, v.Shape...))
		tensors.MustMutableFlatData(t, func(flat []bfloat16.BFloat16) {
			for i := range flat {
				flat[i] = bfloat16.FromBits(uint16(v.Data[2*i]) | uint16(v.Data[2*i+1])<<8)
			}
		})
		return t, nil
	}
	vals, err := v.Float32s()
	if err != nil {
		return nil, err
	}
	if dt == dtypes.BFloat16 {
		return bf16Tensor(vals, v.Shape...), nil
	}
	// FromFlatDataAndDimensions copies, so a memory-mapped F32 view is not retained.
	return tensors.FromFlatDataAndDimensions(vals, v.Shape...), nil
}

// bf16Tensor is a bfloat16 tensor of vals rounded to nearest even.
func bf16Tensor(vals []float32, dims ...int) *tensors.Tensor {
	t := tensors.FromShape(shapes.Make(dtypes.BFloat16, dims...))
	tensors.MustMutableFlatData(t, func(flat []bfloat16.BFloat16) {
		for i, x := range vals {
			flat[i] = bfloat16.FromBits(safetensors.Float32ToBF16(x))
		}
	})
	return t
}

// float32sOf copies a float32 or bfloat16 tensor's values to the host as float32
// (bfloat16 widened exactly).
func float32sOf(t *tensors.Tensor) []float32 {
	if t.DType() != dtypes.BFloat16 {
		return tensors.MustCopyFlatData[float32](t)
	}
	out := make([]float32, t.Size())
	tensors.MustConstFlatData(t, func(flat []bfloat16.BFloat16) {
		for i, x := range flat {
			out[i] = x.Float32()
		}
	})
	return out
}

// matmul is x·Wᵀ for a weight w [out, in] in the weights' dtype: x is rounded to
// w's dtype on the way in and the product is w's dtype. Under PrecisionBF16 that is
// bfloat16 operands and a bfloat16 result (accumulated in float32 and rounded
// once on XLA), as torch.autocast's lower-precision ops (linear, matmul) leave it:
// the activation between the norms stays bfloat16 (docs/training.md "Precision").
//
//	x: [batch, seq, in]; w: [out, in] → [batch, seq, out], w's dtype
func matmul(x, w *Node) *Node {
	return dot(convert(x, w.DType()), []int{2}, nil, w, []int{1}, nil)
}

// widen is x in float32: a bfloat16 activation widened exactly (x itself when it
// is float32). Elementwise math on bfloat16 activations runs on widened values and
// its result is rounded back once (convert), as PyTorch's CPU kernels compute a
// bfloat16 op in float32.
func widen(x *Node) *Node { return ConvertDType(x, dtypes.Float32) }

// like converts x to ref's dtype (a weight vector to the activations' float32, a
// key to the cache's bfloat16).
func like(x, ref *Node) *Node { return convert(x, ref.DType()) }

// convert is ConvertDType rounding to nearest on every backend. XLA rounds a
// float32 to bfloat16 to nearest even; the pure-Go backend (v0.26.0) truncates,
// which biases every rounding toward zero (twice XLA's error in the log-probs).
// There x is first rounded to 8 significant bits in float32 by Veltkamp's split
// (c = (2¹⁶+1)·x; x − c + c), exact in bfloat16 and so untouched by the
// truncation. Ties round to even but for rare double-rounding cases; |x| < 2¹¹¹.
func convert(x *Node, dt dtypes.DType) *Node {
	if dt != dtypes.BFloat16 || x.DType() != dtypes.Float32 {
		return ConvertDType(x, dt)
	}
	if _, ok := x.Graph().Backend().(*simplego.Backend); ok {
		c := MulScalar(x, 1<<16+1)
		x = Add(Sub(x, c), c)
	}
	return ConvertDType(x, dt)
}

// roundVia rounds x to dtype dt and back (a no-op when x is dt already): the
// values a dt tensor would hold, in x's dtype.
func roundVia(x *Node, dt dtypes.DType) *Node {
	if x.DType() == dt {
		return x
	}
	return ConvertDType(convert(x, dt), x.DType())
}

// masterFile is where Restore reads a bf16 policy's masters: optimizer.safetensors'
// master.* tensors, or an F32 model file's tensors.
type masterFile struct {
	*safetensors.File
	prefix string
}

// masterSource is f read for masters: under master.* when f has them.
func masterSource(f *safetensors.File) masterFile {
	for _, n := range f.Names() {
		if strings.HasPrefix(n, masterPrefix) {
			return masterFile{f, masterPrefix}
		}
	}
	return masterFile{f, ""}
}

// inDType is t (a float32 host tensor) in dtype dt: itself, or rounded to bfloat16
// (exact for values a bfloat16 tensor was widened from).
func inDType(t *tensors.Tensor, dt dtypes.DType) *tensors.Tensor {
	if dt != dtypes.BFloat16 {
		return t
	}
	out := bf16Tensor(tensors.MustCopyFlatData[float32](t), t.Shape().Dimensions...)
	t.FinalizeAll()
	return out
}
