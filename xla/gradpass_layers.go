package xla

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// The truncated gradient pass as layer programs (ScorerOptions.LayerPrograms on a
// Trainer's Scorer; scorer_layers.go says why). A chunk runs:
//
//   - forward: embed, then the layer-forward program once per layer (its weights
//     and its layer of the cut cache as inputs, the cache a constant), keeping each
//     layer's input x_i ([1, n, hidden]);
//   - head: the final norm, the logits at the temperature and the chunk's loss
//     (chunkLoss), with the loss's gradient with respect to x_L and to the head's
//     trained weights (the final norm, the head or the tied embedding);
//   - backward, last layer first: the layer-backward program recomputes the layer's
//     forward from x_i and returns the vector-Jacobian product of the cotangent
//     dy = ∂loss/∂x_{i+1} (GoMLX's Gradient of Σ(layer(x_i)·dy)) with respect to x_i
//     and the layer's trained weights;
//   - the embedding's gradient from dx_0 (plus the tied head's), when it is trained.
//
// A bfloat16 model's embedding and head take their gradients in float32 as in the
// unrolled program (vocabgrad.go): the head program's from the logits' cotangent,
// the embedding's as dx_0 scattered into the float32 sum.
//
// So XLA compiles two layer programs instead of L unrolled layers forward and
// backward, at the cost of one more forward of each layer per chunk. Exact and full
// backprop, distillation terms and devices other than 0 run the unrolled program.

// gradLayers are a gradient pass's layer programs.
type gradLayers struct {
	*layerWeights
	embedFwd, layerFwd, head, layerBwd, embedBwd *modelExec
	// trained[j] says whether layer weight j (names[j]) is trained; param[i][j] is
	// layer i's weight j's index in gradPass.params (-1 if not trained).
	trained []bool
	param   [][]int
	// headParams are the head's trained variables (the head program's gradient
	// outputs, in this order) and their indices in params; embed is the
	// embedding's index (-1 if it is not trained).
	headVars   []*mlctx.Variable
	headParams []int
	embed      int
	tiedEmbed  int // the embedding's index among headVars (-1 when untied or not trained)
	chunks     int // chunks run (for tests)
}

// withLayerPrograms makes p run its truncated chunks as layer programs.
func (p *gradPass) withLayerPrograms() error {
	m, cfg := p.model, p.model.Config
	lw, err := newLayerWeights(m)
	if err != nil {
		return err
	}
	gl := &gradLayers{layerWeights: lw, embed: -1, tiedEmbed: -1, trained: make([]bool, len(lw.names))}
	index := map[*mlctx.Variable]int{}
	for i, v := range p.params {
		index[v] = i
	}
	gl.param = make([][]int, len(lw.weights))
	for i, ws := range lw.weights {
		gl.param[i] = make([]int, len(ws))
		for j, v := range ws {
			k, ok := index[v]
			if !ok {
				k = -1
			}
			gl.param[i][j] = k
			gl.trained[j] = gl.trained[j] || ok
		}
	}
	embedVar := m.ctx.GetVariableByScopeAndName("/model/embed_tokens", "weight")
	if k, ok := index[embedVar]; ok {
		gl.embed = k
	}
	headScopes := [][2]string{{"/model/norm", "weight"}, {"/lm_head", "weight"}}
	if cfg.TieWordEmbeddings {
		headScopes[1] = [2]string{"/model/embed_tokens", "weight"}
	}
	for _, sn := range headScopes {
		v := m.ctx.GetVariableByScopeAndName(sn[0], sn[1])
		if k, ok := index[v]; ok && v != nil {
			if v == embedVar {
				gl.tiedEmbed = len(gl.headVars)
			}
			gl.headVars, gl.headParams = append(gl.headVars, v), append(gl.headParams, k)
		}
	}
	nw := len(lw.names)
	// layer builds layer 0's scope with in's weights bound, the cache a constant.
	layer := func(ctx *mlctx.Context, l *list[*Node]) (x, start *Node, ws []*Node, y *Node, unbind func()) {
		x, start = l.next(), l.next()
		lctx := layerCtx(ctx, 0)
		ws = l.take(nw)
		unbind = bindGraph(x.Graph(), layerWeightBinds(lctx.Scope(), lw.names, ws))
		kv := takeContiguous(l, 1)
		kv.constant()
		cos, sin := ropeTables(cfg, start, x.Shape().Dimensions[1])
		return x, start, ws, decoderLayer(lctx, cfg, x, start, cos, sin, kv.layer(0)), unbind
	}
	if gl.embedFwd, err = newModelExec(p.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		return []*Node{embed(ctx, in[0])}
	}); err != nil {
		return err
	}
	if gl.layerFwd, err = newModelExec(p.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		_, _, _, y, unbind := layer(ctx, listOf(in))
		defer unbind()
		return []*Node{y}
	}); err != nil {
		return err
	}
	if gl.layerBwd, err = newModelExec(p.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		dy := in[1]
		l := listOf(append([]*Node{in[0]}, in[2:]...))
		x, _, ws, y, unbind := layer(ctx, l)
		defer unbind()
		nodes := []*Node{x}
		for j, w := range ws {
			if gl.trained[j] {
				nodes = append(nodes, w)
			}
		}
		grads := Gradient(ReduceAllSum(Mul(y, dy)), nodes...)
		out := []*Node{grads[0]}
		for _, g := range grads[1:] {
			out = append(out, ConvertDType(g, dtypes.Float32)) // a bfloat16 weight's gradient is summed in float32
		}
		return out
	}); err != nil {
		return err
	}
	if gl.head, err = newModelExec(p.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		x, targets, temp := l.next(), l.next(), l.next()
		w, c, r := l.next(), l.next(), l.next()
		g := x.Graph()
		// A bfloat16 head (or tied embedding) takes its gradient in float32 from
		// the logits' cotangent, as in the unrolled program (vocabgrad.go); a tied
		// embedding's rows are embedBwd's.
		tap := tapVocab(m, gl.headVars)
		if tap != nil {
			tap.embed = nil
			defer bindGraph(g, &graphBinds{vocab: tap})()
		}
		hidden := rmsNorm(ctx.InAbsPath("/model").In("norm"), x, cfg.RMSNormEps)
		logp := targetLogProbs(tempered(headLogits(ctx, cfg, hidden), temp), targets)
		tokLoss := chunkLoss(logp, w, c, r)
		loss := ReduceAllSum(tokLoss)
		nodes := []*Node{x}
		for _, v := range gl.headVars {
			if tap == nil || v != tap.head {
				nodes = append(nodes, v.ValueGraph(g))
			}
		}
		if tap != nil {
			nodes = append(nodes, tap.logits)
		}
		grads := listOf(Gradient(loss, nodes...))
		out := []*Node{loss, tokLoss, logp, grads.next()}
		var head *Node
		if tap != nil {
			head = tap.headGrad(grads.rest[len(grads.rest)-1]) // float32 already
		}
		for _, v := range gl.headVars {
			if tap != nil && v == tap.head {
				out = append(out, head)
				continue
			}
			out = append(out, ConvertDType(grads.next(), dtypes.Float32))
		}
		return out
	}); err != nil {
		return err
	}
	if gl.embed >= 0 {
		if gl.embedBwd, err = newModelExec(p.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
			tokens, dx := in[0], in[1]
			var tied *Node // the tied head's gradient
			if len(in) > 2 {
				tied = in[2]
			}
			if tap := tapVocab(m, []*mlctx.Variable{embedVar}); tap != nil {
				// A bfloat16 embedding: dx scattered into the float32 gradient
				// (vocabgrad.go); embed records the gather's indices.
				tap.head = nil
				defer bindGraph(tokens.Graph(), &graphBinds{vocab: tap})()
				embed(ctx, tokens)
				return []*Node{tap.embedGrad(tied, dx)}
			}
			x := embed(ctx, tokens)
			g := Gradient(ReduceAllSum(Mul(x, dx)), embedVar.ValueGraph(x.Graph()))[0]
			g = ConvertDType(g, dtypes.Float32)
			if tied != nil {
				g = Add(g, tied)
			}
			return []*Node{g}
		}); err != nil {
			return err
		}
	}
	p.layers = gl
	return nil
}

// runChunkLayers is runChunk for the truncated pass as layer programs, without a
// distillation term: caches are every layer's K, then V, cut to the chunk's span.
func (p *gradPass) runChunkLayers(tokens []int32, terms chunkTerms, off, n int, caches, acc []*tensors.Tensor, res *passResult) error {
	gl, nl := p.layers, p.model.Config.NumHiddenLayers
	T := len(tokens)
	ch := chunkArgs(tokens, off, n, off)
	run := func(what string, e *modelExec, args ...any) ([]*tensors.Tensor, error) {
		out, err := e.ExecOn(p.device, args...)
		if err != nil {
			return nil, fmt.Errorf("gradient of chunk at %d: %s: %w", off, what, err)
		}
		return out, nil
	}
	grads := make([]*tensors.Tensor, len(p.params))
	xs := make([]*tensors.Tensor, 0, nl+1)
	var dy *tensors.Tensor
	defer func() { // frees what is left on an error
		finalize(xs)
		finalize(grads)
		if dy != nil {
			dy.FinalizeAll()
		}
	}()
	out, err := run("embed", gl.embedFwd, ch[0])
	if err != nil {
		return err
	}
	xs = append(xs, out[0])
	for i := range nl {
		w, err := gl.args(i)
		if err != nil {
			return err
		}
		out, err := run(fmt.Sprintf("layer %d", i), gl.layerFwd, append(append([]any{xs[i], ch[2]}, w...), caches[i], caches[nl+i])...)
		if err != nil {
			return err
		}
		xs = append(xs, out[0])
	}
	w, c, r := terms.at(off, n)
	out, err = run("head", gl.head, xs[nl], ch[1], tempArg(terms.temp()),
		tensors.FromFlatDataAndDimensions(w, 1, n), tensors.FromFlatDataAndDimensions(c, 1, n), tensors.FromFlatDataAndDimensions(r, 1, n))
	if err != nil {
		return err
	}
	lossT, tlT, lpT := out[0], out[1], out[2]
	loss := tensors.ToScalar[float32](lossT)
	tl := tensors.MustCopyFlatData[float32](tlT)
	lp := tensors.MustCopyFlatData[float32](lpT)
	finalize(out[:3])
	dy = out[3]
	var tied *tensors.Tensor
	for k, g := range out[4:] {
		if k == gl.tiedEmbed {
			tied = g
			continue
		}
		grads[gl.headParams[k]] = g
	}
	for i := nl - 1; i >= 0; i-- {
		w, err := gl.args(i)
		if err != nil {
			return err
		}
		out, err := run(fmt.Sprintf("layer %d backward", i), gl.layerBwd, append(append([]any{xs[i], dy, ch[2]}, w...), caches[i], caches[nl+i])...)
		if err != nil {
			return err
		}
		dy.FinalizeAll()
		xs[i+1].FinalizeAll()
		xs = xs[:i+1]
		dy = out[0]
		k := 1
		for j, trained := range gl.trained {
			if trained {
				grads[gl.param[i][j]] = out[k]
				k++
			}
		}
	}
	if gl.embed >= 0 {
		args := []any{ch[0], dy}
		if tied != nil {
			args = append(args, tied)
		}
		out, err := run("embed backward", gl.embedBwd, args...)
		if tied != nil {
			tied.FinalizeAll()
		}
		if err != nil {
			return err
		}
		grads[gl.embed] = out[0]
	}
	for i, g := range grads {
		if g == nil {
			return fmt.Errorf("gradient of chunk at %d: layer programs: no gradient for %s", off, p.params[i].ScopeAndName())
		}
	}
	if err := p.acc.addInto(acc, grads, p.device); err != nil {
		return fmt.Errorf("gradient of chunk at %d: %w", off, err)
	}
	gl.chunks++
	res.Loss += float64(loss)
	for i := 0; i < n && off+i+1 < T; i++ {
		res.TokLoss[off+i+1] = tl[i]
		res.LogProb[off+i+1] = lp[i]
	}
	return nil
}

// layersFor says whether the truncated chunk with terms runs as layer programs.
func (p *gradPass) layersFor(terms chunkTerms) bool {
	return p.layers != nil && terms.Distill == nil && p.device == backends.DeviceNum(0)
}
