package xla

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// DefaultChunk is the number of positions a Scorer runs at a time unless told
// otherwise: logits of DefaultChunk × vocab floats exist at once.
const DefaultChunk = 512

// minChunk is the smallest chunk bucket; chunk buckets are Chunk, Chunk/4,
// Chunk/16, … down to minChunk, so a short tail (or a short hinted segment) is not
// padded to a whole chunk.
const minChunk = 16

// ScorerOptions configure a Scorer.
type ScorerOptions struct {
	// Chunk is the number of positions per forward step and per KV-cache page
	// (default DefaultChunk; rounded up to a power of two ≥ 16). Peak memory is the
	// KV cache plus O(Chunk × vocab) and one block of attention scores.
	Chunk int
	// AttentionScores caps the elements of one chunk's attention scores
	// (chunk × heads × cache capacity, default DefaultAttentionScores): as the cache
	// grows the chunk halves (down to 16), so peak memory beyond the KV cache stays
	// flat however long the rollout. The budget applies to one block of the
	// attention span (chunk × heads × block, ≤ 4 pages); with BucketAttention to the
	// capacity.
	AttentionScores int
	// BucketAttention makes every chunk attend over the whole cache capacity bucket
	// (Chunk·2^k ≥ the rollout, masked) of a contiguous cache, as the scorer did
	// before paged caches and causal spans: ~T × capacity attention work instead of
	// ~T²/2, and a copy of the whole cache per chunk. Kept so that a benchmark can
	// run both in one process (bench/attention); not for production.
	BucketAttention bool
}

// DefaultAttentionScores is the default ScorerOptions.AttentionScores: 2^26 float32
// (256 MiB per score tensor).
const DefaultAttentionScores = 1 << 26

// Scorer computes per-token log-probs of rollouts under a Model, chunk by chunk
// against a paged KV cache (paged.go). Shapes are bucketed, chunk lengths to
// Chunk/2^k (Chunk/4^k for short tails, halved further under the attention-score
// budget), and the pages before a chunk that it attends to to a span of 1…8 or
// 5…8×2^k pages (spanFor), so a rollout of T positions compiles at most about
// 9 + 4·log2(T/(8·Chunk)) step programs (29 for 128k with chunk 512), reused by
// every later rollout. A Scorer runs one pass at a time (it owns the
// device); its methods serialise.
type Scorer struct {
	model   *Model
	backend backends.Backend
	chunk   int
	scores  int  // AttentionScores
	bucket  bool // ScorerOptions.BucketAttention
	mu      sync.Mutex
	// step runs one chunk against a contiguous cache (BucketAttention, or a
	// flattened cache), attending over its whole capacity: tokens, targets, start,
	// caches → log-probs, caches.
	step *mlctx.Exec
	// paged runs one chunk against a paged cache (runPaged): tokens, targets,
	// start, offset, [pages per block] (a dummy whose length says it), every
	// layer's past K pages, then V pages, then the head K and V pages → log-probs,
	// per layer 2 K pages, then per layer 2 V pages.
	paged *mlctx.Exec
	grow  *mlctx.Exec // copies caches into a larger capacity
	zeros *mlctx.Exec // an empty cache, made on the device
	flat  *mlctx.Exec // a paged cache's pages, concatenated (flatten)
	// zeroPage is a page of zeros (K or V), standing for pages not yet written.
	zeroPage *tensors.Tensor
	// stats and the shape buckets compiled so far (scorestats.go), under mu.
	stats    ScoreStats
	compiled map[string]bool
	seen     map[[3]int]bool // step programs run: chunk, capacity, span length
}

// NewScorer returns a Scorer of m on backend.
func NewScorer(backend backends.Backend, m *Model, opts ScorerOptions) (*Scorer, error) {
	chunk := opts.Chunk
	if chunk <= 0 {
		chunk = DefaultChunk
	}
	c := minChunk
	for c < chunk {
		c *= 2
	}
	s := &Scorer{model: m, backend: backend, chunk: c, scores: opts.AttentionScores, bucket: opts.BucketAttention, seen: map[[3]int]bool{}}
	if s.scores <= 0 {
		s.scores = DefaultAttentionScores
	}
	cfg := m.Config
	nl := cfg.NumHiddenLayers
	var err error
	s.step, err = mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		tokens, targets, start, caches := in[0], in[1], in[2], in[3:]
		hidden, kOut, vOut := decoder(ctx, cfg, tokens, start, caches[:nl], caches[nl:2*nl])
		return append(append([]*Node{tokenLogProbs(ctx, cfg, hidden, targets)}, kOut...), vOut...)
	})
	if err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	s.step.SetMaxCache(-1)
	s.paged, err = mlctx.NewExec(backend, m.ctx, func(ctx *mlctx.Context, in []*Node) []*Node {
		tokens, targets, start, offset, perBlock := in[0], in[1], in[2], in[3], in[4].Shape().Dimensions[0]
		pages := in[5:]
		np := (len(pages) - 2*nl) / (2 * nl) // past pages per layer
		pastK, pastV := make([][]*Node, nl), make([][]*Node, nl)
		for l := range nl {
			pastK[l], pastV[l] = pages[l*np:(l+1)*np], pages[(nl+l)*np:(nl+l+1)*np]
		}
		head := pages[2*nl*np:]
		hidden, kPages, vPages := decoderPaged(ctx, cfg, tokens, start, offset, pastK, pastV, perBlock, head[:nl], head[nl:])
		out := []*Node{tokenLogProbs(ctx, cfg, hidden, targets)}
		for _, p := range append(kPages, vPages...) {
			out = append(out, p[0], p[1])
		}
		return out
	})
	if err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	s.paged.SetMaxCache(-1)
	if s.flat, err = newFlattenExec(backend, m); err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	if s.grow, err = newGrowExec(backend, m); err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	if s.zeros, err = newZerosExec(backend, m); err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	return s, nil
}

// Model is the model the Scorer runs.
func (s *Scorer) Model() *Model { return s.model }

// Chunk is the number of positions per forward step.
func (s *Scorer) Chunk() int { return s.chunk }

// ErrTooLong is wrapped by the error of a rollout (or hinted sequence) longer than
// the model's max_position_embeddings: a per-rollout problem, not a device failure.
var ErrTooLong = errors.New("sequence longer than the model's context")

// Score returns s_t = log π(y_t | y_<t) for every position of tokens (nats; entry 0,
// which has no context, is NaN) and the KV cache of all of tokens, which the caller
// must Close. tokens must be ids of the model's vocabulary.
func (s *Scorer) Score(ctx context.Context, tokens []int32) ([]float32, *KVCache, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkSeq(len(tokens)); err != nil {
		return nil, nil, err
	}
	if err := s.checkTokens(tokens); err != nil {
		return nil, nil, err
	}
	cache, err := s.newCache(len(tokens))
	if err != nil {
		return nil, nil, err
	}
	out := make([]float32, len(tokens))
	out[0] = float32(math.NaN())
	if err := s.run(ctx, cache, tokens, 0, true, func(i int, lp float32) {
		if i+1 < len(out) {
			out[i+1] = lp
		}
	}); err != nil {
		cache.Close()
		return nil, nil, err
	}
	return out, cache, nil
}

func (s *Scorer) checkSeq(n int) error {
	if n == 0 {
		return errors.New("score: empty sequence")
	}
	if max := s.model.Config.MaxPositionEmbeddings; n > max {
		return fmt.Errorf("score: %d positions, max_position_embeddings is %d: %w", n, max, ErrTooLong)
	}
	return nil
}

func (s *Scorer) checkTokens(tokens []int32) error {
	v := int32(s.model.Config.VocabSize)
	for i, t := range tokens {
		if t < 0 || t >= v {
			return fmt.Errorf("score: token %d at position %d is outside the vocabulary [0, %d)", t, i, v)
		}
	}
	return nil
}

// chunkFor is the chunk bucket for n remaining positions when one attention score
// tensor is width positions wide (the span's block, or the cache capacity with
// BucketAttention): the smallest of Chunk/4^k (≥ minChunk) that holds min(n, Chunk),
// then halved (to ≥ minChunk) while chunk × heads × width exceeds the
// attention-score budget.
func (s *Scorer) chunkFor(n, width int) int {
	c := s.chunk
	for c/4 >= minChunk && c/4 >= n {
		c /= 4
	}
	for c/2 >= minChunk && c*s.model.Config.NumAttentionHeads*width > s.scores {
		c /= 2
	}
	return c
}

// capacityFor is the cache bucket for n positions: Chunk·2^k ≥ n.
func (s *Scorer) capacityFor(n int) int {
	c := s.chunk
	for c < n {
		c *= 2
	}
	return c
}

// newCache returns an empty cache: paged (pages are added as chunks run), or with
// BucketAttention one with room for n positions, made on the device.
func (s *Scorer) newCache(n int) (*KVCache, error) {
	if !s.bucket {
		nl := s.model.Config.NumHiddenLayers
		return &KVCache{model: s.model, pages: &kvPages{size: s.chunk, k: make([][]*tensors.Tensor, nl), v: make([][]*tensors.Tensor, nl)}}, nil
	}
	capacity := s.capacityFor(n)
	out, err := s.timedExec(s.zeros, fmt.Sprintf("zeros %d", capacity), true, []any{make([]float32, capacity)})
	if err != nil {
		return nil, fmt.Errorf("new kv cache of %d: %w", capacity, err)
	}
	nl := s.model.Config.NumHiddenLayers
	return &KVCache{model: s.model, Capacity: capacity, k: out[:nl], v: out[nl:]}, nil
}

// ensure grows c (a new set of tensors) so that it holds n positions. Old tensors
// are released only if owned.
func (s *Scorer) ensure(c *KVCache, n int, owned bool) error {
	if n <= c.Capacity {
		return nil
	}
	capacity := s.capacityFor(n)
	args := []any{make([]float32, capacity)}
	for _, t := range append(append([]*tensors.Tensor{}, c.k...), c.v...) {
		args = append(args, t)
	}
	out, err := s.timedExec(s.grow, fmt.Sprintf("grow %d→%d", c.Capacity, capacity), true, args)
	if err != nil {
		return fmt.Errorf("grow kv cache to %d: %w", capacity, err)
	}
	if owned {
		c.Close()
	}
	nl := s.model.Config.NumHiddenLayers
	c.k, c.v, c.Capacity = out[:nl], out[nl:], capacity
	return nil
}

// run feeds seq, at positions start…, through the model chunk by chunk, writing
// K/V into c (growing it as needed) and calling emit(i, lp) with lp = log p(seq[i+1]
// | …, seq[:i+1]) for i < len(seq)-1. owned says whether c's current tensors may be
// released as they are replaced (false for a shared prefix).
func (s *Scorer) run(ctx context.Context, c *KVCache, seq []int32, start int, owned bool, emit func(i int, lp float32)) error {
	if err := s.model.place(s.backend); err != nil {
		return err
	}
	if c.pages != nil {
		return s.runPaged(ctx, c, seq, start, emit)
	}
	nl := s.model.Config.NumHiddenLayers
	s.stats.Passes++
	s.stats.Tokens += len(seq)
	for off := 0; off < len(seq); {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := start + off + min(len(seq)-off, s.chunk) // past the widest chunk's last position
		n := s.chunkFor(len(seq)-off, max(c.Capacity, s.capacityFor(end)))
		if need := start + off + n; need > c.Capacity {
			if err := s.ensure(c, need, owned); err != nil {
				return err
			}
			owned = true
		}
		t0 := time.Now()
		args := chunkArgs(seq, off, n, start+off)
		key := fmt.Sprintf("step %d@%d", n, c.Capacity)
		s.count(n, c.Capacity, c.Capacity)
		args = append(args, s.cacheArgs(c, owned)...)
		s.stats.CopySeconds += time.Since(t0).Seconds()
		out, err := s.timedExec(s.step, key, false, args)
		if err != nil {
			return fmt.Errorf("score chunk at %d: %w", start+off, err)
		}
		s.emitChunk(out[0], off, n, len(seq), emit)
		if owned {
			for _, t := range append(append([]*tensors.Tensor{}, c.k...), c.v...) {
				t.FinalizeAll() // what donation left of it
			}
		}
		c.k, c.v = out[1:1+nl], out[1+nl:]
		owned = true
		off += n
	}
	c.Len = start + len(seq)
	return nil
}

// chunkArgs are a chunk step's first inputs: the n tokens of seq from off (padded
// with 0), their targets (the next tokens), and the chunk's first position.
func chunkArgs(seq []int32, off, n, pos int) []any {
	tok := make([]int32, n)
	tgt := make([]int32, n)
	copy(tok, seq[off:])
	if off+1 < len(seq) {
		copy(tgt, seq[off+1:])
	}
	return []any{
		tensors.FromFlatDataAndDimensions(tok, 1, n),
		tensors.FromFlatDataAndDimensions(tgt, 1, n),
		tensors.FromScalar(int32(pos)),
	}
}

// emitChunk copies a chunk step's log-probs to the host, frees them, and calls
// emit for those of the chunk's n positions from off that are in seq (of length
// total), not padding.
func (s *Scorer) emitChunk(lp *tensors.Tensor, off, n, total int, emit func(i int, lp float32)) {
	t0 := time.Now()
	lps := tensors.MustCopyFlatData[float32](lp)
	lp.FinalizeAll()
	s.stats.CopySeconds += time.Since(t0).Seconds()
	s.stats.Positions += n
	for i := 0; i < n && off+i < total; i++ {
		emit(off+i, lps[i])
	}
}

// count adds one chunk execution to the attention stats.
func (s *Scorer) count(n, capacity, attended int) {
	st := &s.stats.Attention
	st.Steps++
	st.AttendedPairs += int64(n) * int64(attended)
	if key := [3]int{n, capacity, attended}; !s.seen[key] {
		s.seen[key] = true
		st.Programs++
	}
}

// cacheArgs returns c's tensors as step arguments. Owned tensors are donated, so a
// backend can write the updated cache in place (XLA's DynamicUpdateSlice) instead of
// holding two copies; a shared prefix, or a buffer shared with the host (which
// cannot be donated), is passed as is.
func (s *Scorer) cacheArgs(c *KVCache, owned bool) []any {
	var args []any
	for _, t := range append(append([]*tensors.Tensor{}, c.k...), c.v...) {
		if owned && !t.IsShared() {
			if d, err := DonateTensorBuffer(t, s.backend, 0); err == nil {
				args = append(args, d)
				continue
			}
		}
		args = append(args, t)
	}
	return args
}
