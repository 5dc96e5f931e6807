package xla

import (
	"sync"

	. "github.com/gomlx/gomlx/pkg/core/graph"
)

// graphBinds is what one graph's build binds in place of what the model builders
// would otherwise read or make: the model builders (weight, loraAdd, embedRows,
// headProduct) take a *Graph and a scope, not the program being built, so a
// program that changes how a weight enters registers it here for its graph while
// the graph is built (bindGraph), and they look it up (bindsOf).
type graphBinds struct {
	// weights are a layer program's inputs standing for its layer's variables
	// (scorer_layers.go): (scope, name) → input. weight and loraAdd return them.
	weights map[[2]string]*Node
	// vocab is a bfloat16 gradient program's vocabulary tap (vocabgrad.go), which
	// embedRows and headProduct fill in; nil when the program has none.
	vocab *vocabTap
}

// binds holds the graphBinds of each graph being built.
var binds struct {
	mu sync.Mutex
	by map[*Graph]*graphBinds
}

// bindGraph registers b for g until the returned function is called (when g's
// build returns). A graph has one registration at a time.
func bindGraph(g *Graph, b *graphBinds) (unbind func()) {
	binds.mu.Lock()
	defer binds.mu.Unlock()
	if binds.by == nil {
		binds.by = map[*Graph]*graphBinds{}
	}
	if binds.by[g] != nil {
		panic("xla: a graph's binds registered twice")
	}
	binds.by[g] = b
	return func() {
		binds.mu.Lock()
		defer binds.mu.Unlock()
		delete(binds.by, g)
	}
}

// bindsOf is g's graphBinds, or nil when its build registered none.
func bindsOf(g *Graph) *graphBinds {
	binds.mu.Lock()
	defer binds.mu.Unlock()
	return binds.by[g]
}

// layerWeightBinds binds names (scope relative to scope, name; layerWeights.names)
// to nodes, in that order.
func layerWeightBinds(scope string, names [][2]string, nodes []*Node) *graphBinds {
	m := make(map[[2]string]*Node, len(names))
	for i, n := range names {
		m[[2]string{scope + n[0], n[1]}] = nodes[i]
	}
	return &graphBinds{weights: m}
}

// boundWeight is the input bound to scope and name in g, or nil.
func boundWeight(g *Graph, scope, name string) *Node {
	if b := bindsOf(g); b != nil {
		return b.weights[[2]string{scope, name}]
	}
	return nil
}

// tapOf is g's vocabulary tap, or nil.
func tapOf(g *Graph) *vocabTap {
	if b := bindsOf(g); b != nil {
		return b.vocab
	}
	return nil
}
