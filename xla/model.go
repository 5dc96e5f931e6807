package xla

import (
	"fmt"
	"strconv"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// weight returns variable name of ctx's scope in g. A variable the name table did
// not load is a bug in this package, so it panics (graph building).
func weight(ctx *context.Context, g *Graph, name string) *Node {
	if n := boundWeight(g, ctx.Scope(), name); n != nil {
		return n // an input of a layer program (scorer_layers.go)
	}
	v := ctx.GetVariableByScopeAndName(ctx.Scope(), name)
	if v == nil {
		panic(fmt.Errorf("xla: weight %s/%s is not loaded", ctx.Scope(), name))
	}
	return v.ValueGraph(g)
}

// linear is x·Wᵀ (+ b) with W [out, in] as transformers stores it, so no weight is
// transposed; under PrecisionBF16 the product takes bfloat16 operands and is
// bfloat16 (matmul), the bias added in float32 and the sum rounded back.
//
//	x: [batch, seq, in] → [batch, seq, out], the weights' dtype
func linear(ctx *context.Context, x *Node, bias bool) *Node {
	g := x.Graph()
	y := matmul(x, weight(ctx, g, "weight"))
	if bias {
		y = convert(Add(widen(y), lastAxis(widen(weight(ctx, g, "bias")), y.Rank())), y.DType())
	}
	return loraAdd(ctx, x, y)
}

// rmsNorm is x / sqrt(mean(x², last axis) + eps) · w, in float32 as transformers'
// LlamaRMSNorm (a bfloat16 w is widened). A bfloat16 x (qwen3's q/k norms of the
// projections) is widened, and the normalised x rounded back to bfloat16 before w
// multiplies it, as LlamaRMSNorm's hidden_states.to(input_dtype) does; the result
// is float32 either way (w · x under autocast, w float32).
//
//	x: [..., dim] → [..., dim] float32
func rmsNorm(ctx *context.Context, x *Node, eps float64) *Node {
	last := x.Rank() - 1
	dt := x.DType()
	x = widen(x)
	ms := ReduceAndKeep(Square(x), ReduceMean, last)
	// Div by Sqrt rather than Rsqrt: v0.26.0 has no gradient for Rsqrt.
	return Mul(roundVia(Div(x, Sqrt(AddScalar(ms, eps))), dt), lastAxis(widen(weight(ctx, x.Graph(), "weight")), x.Rank()))
}

// lastAxis reshapes a vector w [n] to rank dims [1, …, 1, n], to broadcast along
// the last axis (GoMLX broadcasts only between equal ranks).
func lastAxis(w *Node, rank int) *Node {
	dims := make([]int, rank)
	for i := range dims {
		dims[i] = 1
	}
	dims[rank-1] = w.Shape().Dimensions[0]
	return Reshape(w, dims...)
}

// mlp is SwiGLU: down(silu(gate(x)) · up(x)). Under PrecisionBF16 gate and up are
// bfloat16 and so are silu(gate) and the product, each rounded once from float32
// (PyTorch's silu and mul of bfloat16 tensors).
//
//	x: [batch, seq, hidden] → [batch, seq, hidden], the weights' dtype
func mlp(ctx *context.Context, c Config, x *Node) *Node {
	gate := linear(ctx.In("gate_proj"), x, c.MLPBias)
	up := linear(ctx.In("up_proj"), x, c.MLPBias)
	g := widen(gate)
	silu := convert(Mul(g, Sigmoid(g)), gate.DType())
	return linear(ctx.In("down_proj"), convert(Mul(widen(silu), widen(up)), up.DType()), c.MLPBias)
}

// decoder runs the embedding, every layer and the final norm over one chunk of
// positions start…start+seq-1, each layer attending through its layer of cache
// (which also takes the chunk's keys and values: chunkOnly for none).
//
//	tokens: [batch, seq] int32; start: scalar int32, or [batch] int32 per-row
//	positions with seq = 1 (decoding) → hidden [batch, seq, hidden]
func decoder(ctx *context.Context, c Config, tokens, start *Node, cache graphCache) *Node {
	x := embed(ctx, tokens)
	cos, sin := ropeTables(c, start, tokens.Shape().Dimensions[1])
	mctx := ctx.InAbsPath("/model")
	for i := range c.NumHiddenLayers {
		x = decoderLayer(layerCtx(ctx, i), c, x, start, cos, sin, cache.layer(i))
	}
	return rmsNorm(mctx.In("norm"), x, c.RMSNormEps)
}

// embed looks the tokens up in the embedding, as float32 whatever the weights'
// precision: the residual stream stays float32.
//
//	tokens: [batch, seq] int32 → [batch, seq, hidden] float32
func embed(ctx *context.Context, tokens *Node) *Node {
	dims := tokens.Shape().Dimensions
	emb := weight(ctx.InAbsPath("/model").In("embed_tokens"), tokens.Graph(), "weight") // [vocab, hidden]
	return embedRows(emb, Reshape(tokens, dims[0], dims[1], 1))
}

// layerCtx is decoder layer i's scope.
func layerCtx(ctx *context.Context, i int) *context.Context {
	return ctx.InAbsPath("/model").In("layers").In(strconv.Itoa(i))
}

// decoderLayer is one pre-norm decoder layer (attention, then the MLP, each added
// to the residual stream) of the layer whose scope is lctx.
//
//	x: [batch, seq, hidden] → [batch, seq, hidden]; the rest as attention's
func decoderLayer(lctx *context.Context, c Config, x, start, cos, sin *Node, cache layerCache) *Node {
	// The residual stream is float32; a bfloat16 output is widened into it.
	x = Add(x, widen(attention(lctx.In("self_attn"), c, rmsNorm(lctx.In("input_layernorm"), x, c.RMSNormEps), start, cos, sin, cache)))
	return Add(x, widen(mlp(lctx.In("mlp"), c, rmsNorm(lctx.In("post_attention_layernorm"), x, c.RMSNormEps))))
}

// tokenLogProbs returns log p(targets[b,t] | tokens[b,:t+1]) from the final hidden
// states of a chunk: the logits exist only for this chunk ([batch, seq, vocab]),
// and only the target's log-prob leaves it, so a long rollout never holds
// [T, vocab].
//
//	hidden: [batch, seq, hidden]; targets: [batch, seq] int32 → [batch, seq] float32
func tokenLogProbs(ctx *context.Context, c Config, hidden, targets *Node) *Node {
	return targetLogProbs(headLogits(ctx, c, hidden), targets)
}

// targetLogProbs returns log softmax(logits)[targets] without a [batch, seq, vocab]
// log-softmax tensor: the target's logit is gathered (a [batch, seq, vocab] mask
// and sum made XLA CPU write a masked copy of the logits), less vocabLogSumExp.
// The gathered logit is at most the max, so the log-prob is ≤ 0.
//
//	logits: [batch, seq, vocab]; targets: [batch, seq] int32 → [batch, seq]
func targetLogProbs(logits, targets *Node) *Node {
	g := logits.Graph()
	dims := logits.Shape().Dimensions
	at := shapes.Make(dtypes.Int32, dims[0], dims[1])
	idx := Stack([]*Node{Iota(g, at, 0), Iota(g, at, 1), ConvertDType(targets, dtypes.Int32)}, 2) // [batch, seq, 3]
	return Sub(Gather(logits, idx), vocabLogSumExp(logits))
}

// lseBlock is the most vocabulary entries whose exponentials vocabLogSumExp sums
// in float32 before it sums the blocks in float64.
const lseBlock = 32

// vocabBlock is the largest divisor of vocab ≤ lseBlock.
func vocabBlock(vocab int) int {
	b := min(lseBlock, vocab)
	for vocab%b != 0 {
		b--
	}
	return b
}

// vocabLogSumExp returns log Σ_v exp(logits[b,t,v]), a block of vocabBlock(vocab)
// ≤ 32 entries at a time: each block's exponentials, its own max subtracted, are
// summed in float32; the blocks' sums, each scaled by exp(its max − the row's max),
// in float64 where the backend has it (all but TPUs). A block's float32 sum is off
// by at most 31 roundings (≤ 1.9e-6 relative, so ≤ 1.9e-6 nats in the result;
// 4.8e-7 measured at a 152k vocabulary, TestVocabLogSumExpFloat64), where one
// sequential float32 sum of the row, as the pure-Go backend takes it, lost 3.3e-5
// nats there, more than the tolerance the scorer is held to against transformers.
// Why blocks: XLA CPU fuses a reduction of at most 32 entries with the exponential
// before it, but splits a longer one into a tree of reduce-windows that each write
// their input out first — the float64 exponentials of a 256-position chunk of
// SmolLM2 were a 96 MiB temporary, the tempered logits another 48, and fresh
// temporaries are fresh pages to fault in (docs/performance.md "The log-softmax's
// temporaries"). A block of −Inf (a masked vocabulary) adds 0.
//
//	logits: [batch, seq, vocab] → [batch, seq], logits' dtype
func vocabLogSumExp(logits *Node) *Node {
	g := logits.Graph()
	dims := logits.Shape().Dimensions
	b, t, v := dims[0], dims[1], dims[2]
	bs := vocabBlock(v)
	blocks := Reshape(logits, b, t, v/bs, bs)
	mb := StopGradient(ReduceAndKeep(blocks, ReduceMax, 3)) // [b, t, v/bs, 1]
	part := ReduceSum(Exp(Sub(blocks, Where(IsFinite(mb), mb, ZerosLike(mb)))), 3)
	acc := logits.DType()
	if g.Backend().Capabilities().DTypes[dtypes.Float64] {
		acc = dtypes.Float64
	}
	// The row's max is taken from the blocks' maxes after the conversion: a max of
	// a max XLA would merge into one max over the row, split again as above.
	mb = ConvertDType(Squeeze(mb, 3), acc) // [b, t, v/bs]
	m := ReduceAndKeep(mb, ReduceMax, 2)   // [b, t, 1]
	sum := ReduceSum(Mul(ConvertDType(part, acc), Exp(Sub(mb, m))), 2)
	return ConvertDType(Add(Log(sum), Squeeze(m, 2)), logits.DType())
}

// tempered divides logits by the sampling temperature T, as the SDPO authors
// (verl's logits.div_(temperature)) and TRL (logits / self.temperature) do before
// every log-softmax of the rollout: the student's, the teacher's and the
// reference's log-probs and distributions are then those of the tempered policy
// the rollout was sampled from (docs/distillation.md "The sampling temperature").
// T = 1 leaves the logits bit for bit.
//
//	logits: [batch, seq, vocab]; temp: scalar float32 → [batch, seq, vocab]
func tempered(logits, temp *Node) *Node {
	return Div(logits, ConvertDType(temp, logits.DType()))
}

// headLogits applies the output head (lm_head, or the embedding when tied).
//
//	hidden: [batch, seq, hidden] → [batch, seq, vocab]
func headLogits(ctx *context.Context, c Config, hidden *Node) *Node {
	head := "/lm_head"
	if c.TieWordEmbeddings {
		head = "/model/embed_tokens"
	}
	w := weight(ctx.InAbsPath(head), hidden.Graph(), "weight") // [vocab, hidden]
	return headProduct(hidden, w)                              // float32 logits (bfloat16 values under bf16)
}
