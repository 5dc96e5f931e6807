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
// transposed; under PrecisionBF16 the product takes bfloat16 operands (matmul).
//
//	x: [batch, seq, in] → [batch, seq, out]
func linear(ctx *context.Context, x *Node, bias bool) *Node {
	g := x.Graph()
	y := matmul(x, weight(ctx, g, "weight"))
	if bias {
		y = Add(y, lastAxis(like(weight(ctx, g, "bias"), y), y.Rank()))
	}
	return loraAdd(ctx, x, y)
}

// rmsNorm is x / sqrt(mean(x², last axis) + eps) · w, in float32 as transformers'
// LlamaRMSNorm (a bfloat16 w is widened).
//
//	x: [..., dim] → [..., dim]
func rmsNorm(ctx *context.Context, x *Node, eps float64) *Node {
	last := x.Rank() - 1
	ms := ReduceAndKeep(Square(x), ReduceMean, last)
	// Div by Sqrt rather than Rsqrt: v0.26.0 has no gradient for Rsqrt.
	return Mul(Div(x, Sqrt(AddScalar(ms, eps))), lastAxis(like(weight(ctx, x.Graph(), "weight"), x), x.Rank()))
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

// mlp is SwiGLU: down(silu(gate(x)) · up(x)).
//
//	x: [batch, seq, hidden] → [batch, seq, hidden]
func mlp(ctx *context.Context, c Config, x *Node) *Node {
	gate := linear(ctx.In("gate_proj"), x, c.MLPBias)
	up := linear(ctx.In("up_proj"), x, c.MLPBias)
	return linear(ctx.In("down_proj"), Mul(Mul(gate, Sigmoid(gate)), up), c.MLPBias)
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
	return ConvertDType(Gather(emb, Reshape(tokens, dims[0], dims[1], 1)), dtypes.Float32)
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
	x = Add(x, attention(lctx.In("self_attn"), c, rmsNorm(lctx.In("input_layernorm"), x, c.RMSNormEps), start, cos, sin, cache))
	return Add(x, mlp(lctx.In("mlp"), c, rmsNorm(lctx.In("post_attention_layernorm"), x, c.RMSNormEps)))
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
// log-softmax tensor.
//
//	logits: [batch, seq, vocab]; targets: [batch, seq] int32 → [batch, seq]
func targetLogProbs(logits, targets *Node) *Node {
	g := logits.Graph()
	lse := vocabLogSumExp(logits) // [batch, seq]
	dims := logits.Shape().Dimensions
	vocab := Iota(g, shapes.Make(dtypes.Int32, dims...), 2)
	hit := Equal(vocab, BroadcastToDims(ExpandAxes(targets, -1), dims...))
	target := ReduceSum(Where(hit, logits, ScalarZero(g, logits.DType())), 2)
	return Sub(target, lse)
}

// vocabLogSumExp returns log Σ_v exp(logits[b,t,v]) with the max subtracted first. The sum
// of the exponentials is taken in float64 where the backend has it (all but TPUs):
// summed in float32, the terms of a 152k vocabulary lose about 1.6e-5 nats, more
// than the tolerance the scorer is held to against transformers.
//
//	logits: [batch, seq, vocab] → [batch, seq], logits' dtype
func vocabLogSumExp(logits *Node) *Node {
	g := logits.Graph()
	m := StopGradient(ReduceAndKeep(logits, ReduceMax, 2))
	e := Exp(Sub(logits, m))
	if acc := dtypes.Float64; g.Backend().Capabilities().DTypes[acc] && logits.DType() != acc {
		return Add(ConvertDType(Log(ReduceSum(ConvertDType(e, acc), 2)), logits.DType()), Squeeze(m, 2))
	}
	return Add(Log(ReduceSum(e, 2)), Squeeze(m, 2))
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
	return matmul(hidden, w)                                   // float32 logits
}
