package xla

import (
	"fmt"
	"regexp"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// GoMLX v0.26.0 emits no input–output aliasing, so a program that updates a
// tensor holds its input and its output at once: a program over every trained
// weight (the AdamW update, a gradient sum) needs the state twice. The trainer
// runs such updates a group of parameters at a time instead (a layer, or the
// embedding), freeing each group's inputs before the next runs, so what it holds
// beyond the state is one group's outputs (docs/performance.md "Training-step
// memory"). Every layer's group has the same shapes, so one program serves them.

// layerScope matches the scope of a decoder layer's variables and names the layer.
var layerScope = regexp.MustCompile(`^/model/layers/(\d+)/`)

// paramGroups splits params (in context order) into update groups: the variables
// of one decoder layer form a group, and every other variable (the embedding, the
// final norm, an untied head) is a group of its own. Groups come smallest first,
// so the largest (usually the embedding) is updated last, when the gradients of
// the others are already freed.
func paramGroups(params []*mlctx.Variable) [][]int {
	var groups [][]int
	layer := map[string]int{} // layer number → index in groups
	for i, v := range params {
		m := layerScope.FindStringSubmatch(v.Scope() + "/")
		if m == nil {
			groups = append(groups, []int{i})
			continue
		}
		g, ok := layer[m[1]]
		if !ok {
			g = len(groups)
			layer[m[1]] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	size := func(g []int) int {
		n := 0
		for _, i := range g {
			n += params[i].Shape().Size()
		}
		return n
	}
	slices.SortStableFunc(groups, func(a, b []int) int { return size(a) - size(b) })
	return groups
}

// subset returns xs[i] for i in idx.
func subset[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for k, i := range idx {
		out[k] = xs[i]
	}
	return out
}

// accumulator sums gradients into per-parameter float32 tensors a group at a
// time. A nil entry of a sum is a zero not yet made: the first gradient added to
// it becomes it, so a step's first chunk holds one set of gradients, not zeros
// and the sum beside them.
type accumulator struct {
	backend backends.Backend
	groups  [][]int
	add     *Exec // a group's sums + gradients → the new sums
}

func newAccumulator(backend backends.Backend, params []*mlctx.Variable) (*accumulator, error) {
	a := &accumulator{backend: backend, groups: paramGroups(params)}
	var err error
	if a.add, err = NewExec(backend, func(in []*Node) []*Node {
		n := len(in) / 2
		out := make([]*Node, n)
		for i := range n {
			out[i] = Add(in[i], in[n+i])
		}
		return out
	}); err != nil {
		return nil, fmt.Errorf("gradient accumulator: %w", err)
	}
	a.add.SetMaxCache(-1)
	return a, nil
}

// addInto adds grads (one per parameter, donated) into acc, whose tensors it
// replaces: a nil sum takes the gradient itself; the others are summed a group at
// a time on dev, each group's inputs freed before the next group runs.
func (a *accumulator) addInto(acc, grads []*tensors.Tensor, dev backends.DeviceNum) error {
	for _, idx := range a.groups {
		var todo []int
		for _, i := range idx {
			if acc[i] == nil {
				acc[i], grads[i] = grads[i], nil
				continue
			}
			todo = append(todo, i)
		}
		if len(todo) == 0 {
			continue
		}
		args := make([]any, 0, 2*len(todo))
		for _, i := range todo {
			args = append(args, donatedOn(acc[i], a.backend, dev))
		}
		for _, i := range todo {
			args = append(args, donatedOn(grads[i], a.backend, dev))
		}
		out, _, err := a.add.ExecWithGraphOnDevice(dev, args...)
		if err != nil {
			return fmt.Errorf("add gradients: %w", err)
		}
		for k, i := range todo {
			acc[i].FinalizeAll() // what donation left of them
			grads[i].FinalizeAll()
			acc[i], grads[i] = out[k], nil
		}
	}
	return nil
}

// filled replaces the nil sums of acc (no gradient added yet) with float32 zeros
// of the parameters' shapes, made on dev.
func (a *accumulator) filled(acc []*tensors.Tensor, params []*mlctx.Variable, dev backends.DeviceNum) error {
	for i, t := range acc {
		if t != nil {
			continue
		}
		shape := shapes.Make(dtypes.Float32, params[i].Shape().Dimensions...)
		z, err := NewExec(a.backend, func(x *Node) *Node { return Zeros(x.Graph(), shape) })
		if err != nil {
			return fmt.Errorf("zero gradient: %w", err)
		}
		out, _, err := z.ExecWithGraphOnDevice(dev, lengthArg(1))
		z.Finalize()
		if err != nil {
			return fmt.Errorf("zero gradient: %w", err)
		}
		acc[i] = out[0]
	}
	return nil
}
