package xla

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// SampleOptions configure one Generate call.
type SampleOptions struct {
	// MaxNew is the most tokens sampled per prompt (required, > 0). A row also stops
	// at the model's max_position_embeddings.
	MaxNew int
	// Temperature divides the logits; 0 is greedy (argmax, log-prob 0).
	Temperature float64
	// TopK keeps the K most likely tokens (0: all).
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability reaches P
	// (0 or 1: all).
	TopP float64
	// Stop ends a row when one of these ids is sampled (it is kept in the output).
	Stop []int32
	// Seed seeds row r's stream (PCG(Seed, r)): the same seed, prompts and backend
	// give the same tokens.
	Seed uint64
}

// Validate names the first bad field.
func (o SampleOptions) Validate() error {
	switch {
	case o.MaxNew <= 0:
		return fmt.Errorf("sample options: max_new %d: want > 0", o.MaxNew)
	case o.Temperature < 0:
		return fmt.Errorf("sample options: temperature %g: want ≥ 0", o.Temperature)
	case o.TopK < 0:
		return fmt.Errorf("sample options: top_k %d: want ≥ 0", o.TopK)
	case o.TopP < 0 || o.TopP > 1:
		return fmt.Errorf("sample options: top_p %g: want in [0, 1]", o.TopP)
	}
	return nil
}

// Why a row stopped.
const (
	StopToken   = "stop"    // sampled one of SampleOptions.Stop
	StopLength  = "length"  // reached MaxNew
	StopContext = "context" // reached max_position_embeddings
)

// Sample is what Generate returns for one prompt.
type Sample struct {
	Tokens []int32 // the sampled tokens (a stop token included)
	// LogProbs[i] is log q(Tokens[i]) under the distribution actually sampled from:
	// softmax(logits/T) restricted to top-k and top-p and renormalised (0 when greedy).
	LogProbs []float32
	// PolicyLogProbs[i] is log π(Tokens[i] | prompt, Tokens[:i]) at temperature 1
	// without truncation: what Scorer.Score gives for the same sequence.
	PolicyLogProbs []float32
	Reason         string // StopToken, StopLength or StopContext
}

// Sampler generates from a Model with a KV cache: a prefill runs every prompt but
// its last token in chunks (all rows at the same positions, right-padded), then each
// decode step feeds one token per row at that row's own position and samples the
// next on the host. The cache capacity is a power-of-two bucket (≥ 64) of the
// longest prompt plus MaxNew (at most Headroom of it at first), doubled when a row
// reaches it, so decoding reuses one executable per (batch, capacity bucket) and
// never recompiles per position. A Sampler runs one
// Generate at a time (it owns the device); calls serialise.
type Sampler struct {
	model   *Model
	backend backends.Backend
	chunk   int
	mu      sync.Mutex
	prefill *mlctx.Exec // tokens [b, n], start, caches → Σhidden, caches
	step    *mlctx.Exec // tokens [b], pos [b], caches → logits [b, vocab], caches
	grow    *mlctx.Exec // caches → caches of a larger capacity
	// headroom is how many new tokens the first cache bucket holds beyond the
	// longest prompt (more are reached by doubling).
	headroom int
}

// defaultHeadroom is Sampler.headroom: a call with a large MaxNew whose rows stop
// early does not pay for (or attend over) a cache of MaxNew positions.
const defaultHeadroom = 256

// minCapacity is the smallest cache bucket of a Sampler.
const minCapacity = 64

// NewSampler returns a Sampler of m on backend. chunk bounds the prefill's
// positions per step (0: DefaultChunk).
func NewSampler(backend backends.Backend, m *Model, chunk int) (*Sampler, error) {
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	c := minChunk
	for c < chunk {
		c *= 2
	}
	s := &Sampler{model: m, backend: backend, chunk: c, headroom: defaultHeadroom}
	cfg := m.Config
	nl := cfg.NumHiddenLayers
	var err error
	s.prefill, err = mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		// The final hidden state leaves as one float: v0.26.0's pure-Go backend
		// panics (index out of range) running a graph with nodes no output uses.
		h, kOut, vOut := decoder(ctx, cfg, in[0], in[1], in[2:2+nl], in[2+nl:2+2*nl])
		return append(append([]*Node{ReduceAllSum(h)}, kOut...), vOut...)
	})
	if err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	s.prefill.SetMaxCache(-1)
	s.step, err = mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		return decodeStep(ctx, cfg, in[0], in[1], in[2:2+nl], in[2+nl:2+2*nl])
	})
	if err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	s.step.SetMaxCache(-1)
	if s.grow, err = newGrowExec(backend, m); err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	return s, nil
}

// decodeStep feeds one token per row at the row's own position and returns the
// next-token logits and the caches with the rows' keys and values written.
//
//	tokens, pos: [batch] int32; kCache, vCache: layers × [capacity, batch, kv, hd]
//	→ [logits [batch, vocab], kOut…, vOut…]
func decodeStep(ctx *mlctx.Context, c Config, tokens, pos *Node, kCache, vCache []*Node) []*Node {
	b := tokens.Shape().Dimensions[0]
	hidden, kOut, vOut := decoder(ctx, c, Reshape(tokens, b, 1), pos, kCache, vCache) // [b, 1, hidden]
	logits := Reshape(headLogits(ctx, c, hidden), b, c.VocabSize)
	return append(append([]*Node{logits}, kOut...), vOut...)
}

// Model is the model the Sampler runs.
func (s *Sampler) Model() *Model { return s.model }

// Generate samples a continuation of every prompt (token ids; lengths may differ,
// each ≥ 1) and returns one Sample per prompt, in order.
func (s *Sampler) Generate(ctx context.Context, prompts [][]int32, opts SampleOptions) ([]Sample, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if len(prompts) == 0 {
		return nil, errors.New("generate: no prompts")
	}
	maxPos, vocab := s.model.Config.MaxPositionEmbeddings, int32(s.model.Config.VocabSize)
	longest := 0
	for i, p := range prompts {
		if len(p) == 0 {
			return nil, fmt.Errorf("generate: prompt %d is empty", i)
		}
		if len(p) >= maxPos {
			return nil, fmt.Errorf("generate: prompt %d has %d tokens, max_position_embeddings is %d: %w", i, len(p), maxPos, ErrTooLong)
		}
		for j, t := range p {
			if t < 0 || t >= vocab {
				return nil, fmt.Errorf("generate: prompt %d: token %d at position %d is outside the vocabulary [0, %d)", i, t, j, vocab)
			}
		}
		longest = max(longest, len(p))
	}
	capacity := minCapacity
	for capacity < min(longest+min(opts.MaxNew, s.headroom), maxPos) {
		capacity *= 2
	}
	if err := s.model.place(s.backend); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	c := s.newCache(len(prompts), capacity)
	defer c.Close()
	if err := s.runPrefill(ctx, c, prompts); err != nil {
		return nil, err
	}
	return s.decode(ctx, c, prompts, opts)
}

// newCache returns zeroed caches for b rows of capacity positions.
func (s *Sampler) newCache(b, capacity int) *KVCache {
	cfg := s.model.Config
	c := &KVCache{model: s.model, Capacity: capacity}
	for range cfg.NumHiddenLayers {
		c.k = append(c.k, tensors.FromShape(shapes.Make(dtypes.Float32, capacity, b, cfg.NumKeyValueHeads, cfg.HeadDim)))
		c.v = append(c.v, tensors.FromShape(shapes.Make(dtypes.Float32, capacity, b, cfg.NumKeyValueHeads, cfg.HeadDim)))
	}
	return c
}

// runPrefill writes the keys and values of every prompt but its last token into c,
// all rows at positions 0…, right-padded with token 0: a padded position of row r
// lies at or after its last prompt token, which decoding overwrites before any
// query can see it.
func (s *Sampler) runPrefill(ctx context.Context, c *KVCache, prompts [][]int32) error {
	b, n := len(prompts), 0
	for _, p := range prompts {
		n = max(n, len(p)-1)
	}
	heads := s.model.Config.NumAttentionHeads
	for off := 0; off < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		// The chunk: a power of two ≤ Chunk that holds what is left (≥ minChunk),
		// halved while one chunk's attention scores exceed the default budget.
		size := minChunk
		for size < s.chunk && size < n-off {
			size *= 2
		}
		for size/2 >= minChunk && b*heads*size*c.Capacity > DefaultAttentionScores {
			size /= 2
		}
		tok := make([]int32, b*size)
		for r, p := range prompts {
			if off < len(p)-1 {
				copy(tok[r*size:(r+1)*size], p[off:len(p)-1])
			}
		}
		args := []any{tensors.FromFlatDataAndDimensions(tok, b, size), tensors.FromScalar(int32(off))}
		out, err := s.prefill.Exec(append(args, c.donate(s.backend)...)...)
		if err != nil {
			return fmt.Errorf("prefill at %d: %w", off, err)
		}
		out[0].FinalizeAll()
		c.replace(out[1:])
		off += size
	}
	return nil
}

// donate returns c's tensors as arguments, donated where the backend allows.
func (c *KVCache) donate(backend backends.Backend) []any {
	var args []any
	for _, t := range append(slices.Clone(c.k), c.v...) {
		args = append(args, donated(t, backend))
	}
	return args
}

// replace frees what donation left of c's tensors and takes out (k… then v…).
func (c *KVCache) replace(out []*tensors.Tensor) {
	for _, t := range append(slices.Clone(c.k), c.v...) {
		t.FinalizeAll()
	}
	nl := len(c.k)
	c.k, c.v = out[:nl], out[nl:]
}

// decode feeds every row's last prompt token, then each sampled token, one step at
// a time, until every row has stopped.
func (s *Sampler) decode(ctx context.Context, c *KVCache, prompts [][]int32, opts SampleOptions) ([]Sample, error) {
	b, vocab, maxPos := len(prompts), s.model.Config.VocabSize, s.model.Config.MaxPositionEmbeddings
	out := make([]Sample, b)
	cur, pos := make([]int32, b), make([]int32, b)
	rngs := make([]*rand.Rand, b)
	for r, p := range prompts {
		cur[r], pos[r] = p[len(p)-1], int32(len(p)-1)
		rngs[r] = rand.New(rand.NewPCG(opts.Seed, uint64(r)))
	}
	var scratch pickScratch
	for step, live := 0, b; live > 0; step++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if need := int(slices.Max(pos)) + 1; need > c.Capacity {
			if err := s.growCache(c, need); err != nil {
				return nil, err
			}
		}
		args := []any{tensors.FromFlatDataAndDimensions(slices.Clone(cur), b), tensors.FromFlatDataAndDimensions(slices.Clone(pos), b)}
		res, err := s.step.Exec(append(args, c.donate(s.backend)...)...)
		if err != nil {
			return nil, fmt.Errorf("decode at step %d: %w", step, err)
		}
		logits := tensors.MustCopyFlatData[float32](res[0])
		res[0].FinalizeAll()
		c.replace(res[1:])
		for r := range out {
			o := &out[r]
			if o.Reason != "" {
				continue
			}
			tok, lp, plp := pick(logits[r*vocab:(r+1)*vocab], opts, rngs[r], &scratch)
			o.Tokens = append(o.Tokens, tok)
			o.LogProbs = append(o.LogProbs, float32(lp))
			o.PolicyLogProbs = append(o.PolicyLogProbs, float32(plp))
			switch {
			case slices.Contains(opts.Stop, tok):
				o.Reason = StopToken
			case len(o.Tokens) == opts.MaxNew:
				o.Reason = StopLength
			case int(pos[r])+2 >= maxPos: // the token just sampled sits at pos+1, the last position
				o.Reason = StopContext
			default:
				cur[r], pos[r] = tok, pos[r]+1
				continue
			}
			live--
		}
	}
	return out, nil
}

// growCache doubles c's capacity until it holds n positions.
func (s *Sampler) growCache(c *KVCache, n int) error {
	capacity := c.Capacity
	for capacity < n {
		capacity *= 2
	}
	args := []any{make([]float32, capacity)}
	for _, t := range append(slices.Clone(c.k), c.v...) {
		args = append(args, t)
	}
	out, err := s.grow.Exec(args...)
	if err != nil {
		return fmt.Errorf("grow kv cache to %d: %w", capacity, err)
	}
	c.replace(out)
	c.Capacity = capacity
	return nil
}

// newGrowExec returns the executable that copies caches into a larger capacity
// (zeros after the old positions).
//
//	in[0]: a dummy [newCapacity]; in[1:]: caches [capacity, batch, kv, hd] → [newCapacity, batch, kv, hd] each
func newGrowExec(backend backends.Backend, m *Model) (*mlctx.Exec, error) {
	e, err := mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		newCap := in[0].Shape().Dimensions[0]
		out := make([]*Node, len(in)-1)
		for i, x := range in[1:] {
			d := x.Shape().Dimensions
			pad := Zeros(x.Graph(), shapes.Make(x.DType(), newCap-d[0], d[1], d[2], d[3]))
			out[i] = Concatenate([]*Node{x, pad}, 0)
		}
		return out
	})
	if err != nil {
		return nil, err
	}
	e.SetMaxCache(-1)
	return e, nil
}
