package xla

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Layer programs (ScorerOptions.LayerPrograms; docs/performance.md "Cold start").
// The unrolled step program is the whole network: XLA compiles every layer's
// fusions into their own kernels, so its compile grows with the depth (a SmolLM2
// gradient program at 30 layers: 13–22 s). GoMLX v0.26.0 has no While or Call op, so
// the loop over layers cannot live inside one program; here it runs on the host.
// A chunk runs three kinds of program:
//
//   - embed: the chunk's tokens → its residual stream [1, n, hidden] float32;
//   - layer: one decoder layer, its weights the program's inputs (not the model's
//     variables, which a program binds by name): the residual stream, the chunk's
//     first position, the layer's weights and its layer of the paged cache (the
//     past pages and the head page, pagedCache.stepArgs of one layer) → the new
//     residual stream and the two pages written. Every layer has the same shapes,
//     so one program per chunk shape serves all of them, run L times;
//   - head: the final norm, the head's logits at the temperature, the targets'
//     log-probs.
//
// So XLA compiles one layer instead of L; the residual stream goes through device
// memory between layers (a [n, hidden] tensor, small beside a layer's weights).

// layerPrograms are a Scorer's embed, layer and head programs and the layers'
// weights in the layer program's input order.
type layerPrograms struct {
	embed, layer, head *modelExec
	*layerWeights
}

// layerWeights are the inputs a layer program takes for each layer's weights:
// names are the variables of layer 0 as scope (relative to the layer's) and name;
// weights[i] are layer i's variables of those names, in that order.
type layerWeights struct {
	names   [][2]string
	weights [][]*mlctx.Variable
}

// newLayerWeights lists m's layers' variables, every layer with the names of
// layer 0's.
func newLayerWeights(m *Model) (*layerWeights, error) {
	nl := m.Config.NumHiddenLayers
	lw := &layerWeights{weights: make([][]*mlctx.Variable, nl)}
	byName := map[string]*mlctx.Variable{}
	for v := range m.ctx.IterVariables() {
		byName[v.ScopeAndName()] = v
	}
	scope0 := layerCtx(m.ctx, 0).Scope()
	for v := range m.ctx.IterVariables() {
		if rel, ok := strings.CutPrefix(v.Scope(), scope0); ok && (rel == "" || strings.HasPrefix(rel, mlctx.ScopeSeparator)) {
			lw.names = append(lw.names, [2]string{rel, v.Name()})
		}
	}
	slices.SortFunc(lw.names, func(a, b [2]string) int { return strings.Compare(a[0]+"\x00"+a[1], b[0]+"\x00"+b[1]) })
	if len(lw.names) == 0 {
		return nil, fmt.Errorf("layer programs: no variables under %s", scope0)
	}
	for i := range nl {
		scope := layerCtx(m.ctx, i).Scope()
		for _, n := range lw.names {
			v := byName[mlctx.JoinScope(scope+n[0], n[1])]
			if v == nil {
				return nil, fmt.Errorf("layer programs: layer %d has no %s/%s as layer 0 has", i, scope+n[0], n[1])
			}
			lw.weights[i] = append(lw.weights[i], v)
		}
	}
	return lw, nil
}

// newLayerPrograms returns m's layer programs on backend.
func newLayerPrograms(backend backends.Backend, m *Model) (*layerPrograms, error) {
	cfg := m.Config
	lw, err := newLayerWeights(m)
	if err != nil {
		return nil, err
	}
	lp := &layerPrograms{layerWeights: lw}
	if lp.embed, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		return []*Node{embed(ctx, in[0])}
	}); err != nil {
		return nil, err
	}
	if lp.layer, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		x, start := l.next(), l.next()
		lctx := layerCtx(ctx, 0)
		defer bindGraph(x.Graph(), layerWeightBinds(lctx.Scope(), lp.names, l.take(len(lp.names))))()
		cache := takePaged(l, 1)
		cos, sin := ropeTables(cfg, start, x.Shape().Dimensions[1])
		x = decoderLayer(lctx, cfg, x, start, cos, sin, cache.layer(0))
		return append([]*Node{x}, cache.outputs()...)
	}); err != nil {
		return nil, err
	}
	if lp.head, err = newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		x, targets, temp := in[0], in[1], in[2]
		hidden := rmsNorm(ctx.InAbsPath("/model").In("norm"), x, cfg.RMSNormEps)
		return []*Node{targetLogProbs(tempered(headLogits(ctx, cfg, hidden), temp), targets)}
	}); err != nil {
		return nil, err
	}
	return lp, nil
}

// args are layer i's weights as the layer program's inputs (on the device: the
// caller placed the model).
func (lw *layerWeights) args(i int) ([]any, error) {
	out := make([]any, len(lw.weights[i]))
	for j, v := range lw.weights[i] {
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
		}
		out[j] = t
	}
	return out, nil
}

// runLayers is runPaged with the layer programs: per chunk the embed program,
// the layer program once per layer (each against its layer of p), then the head.
// The pages every layer wrote are put into p once all layers ran, as the unrolled
// step returns them.
func (s *Scorer) runLayers(ctx context.Context, p *pagedCache, seq []int32, start int, temp float64, emit func(i int, lp float32)) error {
	lp := s.layers
	nl := s.model.Config.NumHiddenLayers
	return s.pagedChunks(ctx, p, seq, start, func(off, pos, n int, past kvSpan, zero *tensors.Tensor) error {
		ch := chunkArgs(seq, off, n, pos)
		out, _, err := s.execTimed(lp.embed, fmt.Sprintf("embed %d", n), ch[:1])
		if err != nil {
			return fmt.Errorf("score chunk at %d: embed: %w", pos, err)
		}
		x := out[0]
		var written kvPair[[2]*tensors.Tensor]
		free := func() {
			x.FinalizeAll()
			for _, side := range [][][2]*tensors.Tensor{written.K, written.V} {
				for _, pair := range side {
					pair[0].FinalizeAll()
					pair[1].FinalizeAll()
				}
			}
		}
		key := fmt.Sprintf("layer %d span %d×%d", n, past.Blocks, past.Block)
		for i := range nl {
			w, err := lp.args(i)
			if err != nil {
				free()
				return err
			}
			one := &pagedCache{size: p.size, k: p.k[i : i+1], v: p.v[i : i+1]}
			args := append(append([]any{x, ch[2]}, w...), one.stepArgs(pos, past, zero)...)
			out, _, err := s.execTimed(lp.layer, key, args)
			if err != nil {
				free()
				return fmt.Errorf("score chunk at %d: layer %d: %w", pos, i, err)
			}
			x.FinalizeAll()
			x = out[0]
			pages := takeWritten(listOf(out[1:]), 1)
			written.K, written.V = append(written.K, pages.K[0]), append(written.V, pages.V[0])
		}
		out, _, err = s.execTimed(lp.head, fmt.Sprintf("head %d", n), []any{x, ch[1], tempArg(temp)})
		if err != nil {
			free()
			return fmt.Errorf("score chunk at %d: head: %w", pos, err)
		}
		x.FinalizeAll()
		s.stats.Chunks++
		s.emitChunk(out[0], off, n, len(seq), emit)
		p.write(written, pos, n)
		return nil
	})
}
