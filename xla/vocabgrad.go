package xla

import (
	"sync/atomic"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// A bfloat16 weight's gradient, as autodiff makes it, is bfloat16: the product's
// adjoint comes out in its operands' dtype and is widened to the float32 sum
// afterwards (newGradExec). For the [vocab, hidden] weights, the embedding and the
// head (the same tensor when tied), that is two bfloat16 [vocab, hidden] temporaries
// in the gradient program, the head's adjoint and the gather's scatter, added in
// bfloat16 and then widened beside them: 0.58 GiB at a 152k vocabulary and hidden
// 1,024, which kept a bf16 step's gradient pass above f32's (docs/performance.md
// "Training-step memory"). In a bfloat16 model's gradient program these weights are
// kept from autodiff instead (StopGradient where decoder gathers from the
// embedding and where headLogits multiplies by the head), and their gradients
// are made from the cotangents of the gathered rows and of the logits, in
// float32, straight into the program's float32 output: the head's as one product
// of the logits' cotangent with the head's bfloat16 input widened (its products
// exact in float32), the embedding's as a scatter-add of the rows' cotangent into
// it. Nothing is rounded to bfloat16 on the way, so the gradient is also the
// more precise one. The layer programs' gradient pass (gradpass_layers.go) makes them
// the same way: its head program the head's, its embedding-backward program the
// embedding's, from the first layer's input cotangent.

// vocabTap is where a gradient program's [vocab, hidden] weights enter the model:
// embedRows and headProduct fill it in when the program registered one for its
// graph (tapVocab, graphBinds).
type vocabTap struct {
	embed, head *mlctx.Variable // the trained bfloat16 embedding and head (nil: not tapped); equal when tied
	indices     *Node           // the gather's indices [batch, seq, 1]
	rows        *Node           // the gathered rows widened to float32 [batch, seq, hidden]
	hidden      *Node           // the head's input, float32 [batch, seq, hidden]
	logits      *Node           // the head's float32 logits [batch, seq, vocab]
}

// vocabTapOff makes newGradExec differentiate the [vocab, hidden] weights by
// autodiff in bfloat16, as before (TestBF16VocabGradients compares the two).
var vocabTapOff atomic.Bool

// tapVocab returns a tap of the bfloat16 embedding and head of m among params
// (the variables a gradient program differentiates), nil when there is none; the
// program registers it for its graph (bindGraph) while it builds the model.
func tapVocab(m *Model, params []*mlctx.Variable) *vocabTap {
	if vocabTapOff.Load() {
		return nil
	}
	embed := m.ctx.GetVariableByScopeAndName("/model/embed_tokens", "weight")
	head := embed
	if !m.Config.TieWordEmbeddings {
		head = m.ctx.GetVariableByScopeAndName("/lm_head", "weight")
	}
	t := &vocabTap{}
	for _, v := range params {
		if v.Shape().DType != dtypes.BFloat16 {
			continue
		}
		if v == embed {
			t.embed = v
		}
		if v == head {
			t.head = v
		}
	}
	if t.embed == nil && t.head == nil {
		return nil
	}
	return t
}

// embedRows returns the rows of the embedding emb for indices [batch, seq, 1],
// widened to float32 (the residual stream's dtype); in a tapped graph emb is kept
// from autodiff and the rows are recorded.
func embedRows(emb, indices *Node) *Node {
	t := tapOf(emb.Graph())
	if t == nil || t.embed == nil {
		return ConvertDType(Gather(emb, indices), dtypes.Float32)
	}
	rows := ConvertDType(Gather(StopGradient(emb), indices), dtypes.Float32)
	t.indices, t.rows = indices, rows
	return rows
}

// headProduct returns hidden·wᵀ (matmul) for the output head w, widened to float32
// (a bfloat16 head's logits are bfloat16 as autocast leaves them, widened for the
// log-softmax as transformers' loss does); in a tapped graph w is kept from
// autodiff and its input and output are recorded.
func headProduct(hidden, w *Node) *Node {
	t := tapOf(hidden.Graph())
	if t == nil || t.head == nil {
		return widen(matmul(hidden, w))
	}
	logits := widen(matmul(hidden, StopGradient(w)))
	t.hidden, t.logits = hidden, logits
	return logits
}

// wrt are the nodes whose cotangents the tapped weights' gradients are made of:
// the rows (a tapped embedding), then the logits (a tapped head).
func (t *vocabTap) wrt() []*Node {
	var out []*Node
	if t.embed != nil {
		out = append(out, t.rows)
	}
	if t.head != nil {
		out = append(out, t.logits)
	}
	return out
}

// grads returns the float32 gradient of each tapped variable (a map from it) from
// the cotangents of wrt's nodes, in wrt's order.
//
//	cot: [batch, seq, hidden] (rows), [batch, seq, vocab] (logits) → [vocab, hidden] float32
func (t *vocabTap) grads(cot []*Node) map[*mlctx.Variable]*Node {
	out := map[*mlctx.Variable]*Node{}
	var rows *Node
	if t.embed != nil {
		rows, cot = cot[0], cot[1:]
	}
	if t.head != nil {
		out[t.head] = t.headGrad(cot[0])
	}
	if t.embed != nil {
		out[t.embed] = t.embedGrad(out[t.embed], rows) // the head's added in, when tied
	}
	return out
}

// headGrad is the head's float32 gradient from the cotangent of the logits.
//
//	logits: [batch, seq, vocab] → [vocab, hidden] float32
func (t *vocabTap) headGrad(logits *Node) *Node {
	// The head's input as the product took it: rounded to bfloat16 (matmul),
	// then widened exactly.
	x := ConvertDType(convert(t.hidden, dtypes.BFloat16), dtypes.Float32)
	// Σ over batch and positions of cotangent[b,t,v]·x[b,t,d] → [vocab, hidden].
	return DotGeneral(logits, []int{0, 1}, nil, x, []int{0, 1}, nil)
}

// embedGrad is the embedding's float32 gradient from the cotangent of the
// gathered rows, scattered into sum (a float32 [vocab, hidden] gradient to add to,
// the tied head's; nil: zeros).
//
//	rows: [batch, seq, hidden] → [vocab, hidden] float32
func (t *vocabTap) embedGrad(sum, rows *Node) *Node {
	if sum == nil {
		sum = Zeros(rows.Graph(), shapes.Make(dtypes.Float32, t.embed.Shape().Dimensions...))
	}
	return ScatterSum(sum, t.indices, rows, false, false)
}
