package xla

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// DefaultChunk is the number of positions a Scorer runs at a time unless told
// otherwise: logits of DefaultChunk × vocab floats exist at once.
const DefaultChunk = 512

// minChunk is the smallest chunk bucket; chunk buckets are Chunk, Chunk/2,
// Chunk/4, … down to minChunk (chunkRung), so a short rollout, tail or hinted
// segment is not padded to a whole chunk.
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
	// QuarterChunks restores the chunk ladder before issue 42, Chunk/4^k (512, 128,
	// 32): a rollout of 129…512 positions runs as one chunk of 512. Kept so that a
	// benchmark can run both ladders in one process (BenchmarkScoreShortRollouts);
	// not for production.
	QuarterChunks bool
	// LayerPrograms runs a chunk as an embed program, one decoder layer's program
	// run once per layer with that layer's weights as inputs, and a head program
	// (scorer_layers.go), instead of one program with every layer unrolled: XLA
	// compiles one layer instead of L. Plain scoring on the paged cache only
	// (teacher views and BucketAttention run the unrolled programs). A Trainer
	// given it (TrainerOptions.Scorer) also runs its truncated gradient pass as
	// layer programs, forward and backward (gradpass_layers.go).
	LayerPrograms bool
}

// DefaultAttentionScores is the default ScorerOptions.AttentionScores: 2^26 float32
// (256 MiB per score tensor).
const DefaultAttentionScores = 1 << 26

// Scorer computes per-token log-probs of rollouts under a Model, chunk by chunk
// against a paged KV cache (kvcache_paged.go, scorer_paged.go). Shapes are
// bucketed, chunk lengths to Chunk/2^k ≥ minChunk (chunkRung for short rollouts
// and tails, halved further under the attention-score budget), and the pages
// before a chunk that it attends to to a span of 1…8 or 5…8×2^k pages (spanFor),
// so a rollout of T positions compiles at most about 9 + 4·log2(T/(8·Chunk))
// full-chunk step programs (29 for 128k with chunk 512) and its tail at most
// log2(Chunk/minChunk) more (5 at chunk 512); over all lengths up to T, at most
// log2(Chunk/minChunk) + 1 chunk lengths per span (6 × 29 = 174 for 128k; 6 × 4 = 24 up to 2,048), each
// compiled once and reused by every later rollout. A Scorer runs one pass at a time (it
// owns the device); its methods serialise.
type Scorer struct {
	model   *Model
	backend backends.Backend
	chunk   int
	scores  int  // AttentionScores
	bucket  bool // ScorerOptions.BucketAttention
	quarter bool // ScorerOptions.QuarterChunks
	mu      sync.Mutex
	// device runs its programs and holds its caches (0 unless a data-parallel
	// trainer made it for another device: dataparallel.go).
	device backends.DeviceNum
	// step runs one chunk against a contiguous cache (BucketAttention), attending
	// over its whole capacity; paged against a paged cache (runPaged). Both take
	// chunkArgs, then the cache (contiguousCache.args, pagedCache.stepArgs), and
	// return the chunk's log-probs, then what the cache layout writes.
	step, paged *modelExec
	caches      cacheExecs
	// zeroPage is a page of zeros (K or V), standing for pages not yet written.
	zeroPage *tensors.Tensor
	// stats and the shape buckets compiled so far (scorestats.go), under mu.
	stats    ScoreStats
	compiled map[string]bool
	seen     map[[3]int]bool // step programs run: chunk, capacity, span length
	// views are the scoring steps that also keep a TeacherView, made on first use.
	views map[TeacherView]*viewSink
	// layers are the layer programs (ScorerOptions.LayerPrograms), else nil.
	layers *layerPrograms
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
	s := &Scorer{model: m, backend: backend, chunk: c, scores: opts.AttentionScores, bucket: opts.BucketAttention, quarter: opts.QuarterChunks, seen: map[[3]int]bool{}}
	if s.scores <= 0 {
		s.scores = DefaultAttentionScores
	}
	nl := m.Config.NumHiddenLayers
	var err error
	if s.step, err = newScoreExec(backend, m, func(l *list[*Node]) graphCache { return takeContiguous(l, nl) }, TeacherView{}); err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	if s.paged, err = newScoreExec(backend, m, func(l *list[*Node]) graphCache { return takePaged(l, nl) }, TeacherView{}); err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	if s.caches, err = newCacheExecs(backend, m); err != nil {
		return nil, fmt.Errorf("new scorer: %w", err)
	}
	if opts.LayerPrograms {
		if s.layers, err = newLayerPrograms(backend, m); err != nil {
			return nil, fmt.Errorf("new scorer: %w", err)
		}
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
	return s.ScoreAt(ctx, tokens, 1)
}

// ScoreAt is Score for the policy at sampling temperature temp (> 0): the logits
// are divided by it before the log-softmax (tempered), as the trainer scores a
// rollout sampled at temp. The KV cache is the same at every temperature.
func (s *Scorer) ScoreAt(ctx context.Context, tokens []int32, temp float64) ([]float32, *KVCache, error) {
	if !(temp > 0) || math.IsInf(temp, 0) {
		return nil, nil, fmt.Errorf("score: temperature %g: want a finite value > 0", temp)
	}
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
	if err := s.run(ctx, cache, tokens, 0, temp, func(i int, lp float32) {
		if i+1 < len(out) {
			out[i+1] = lp
		}
	}, nil); err != nil {
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
// BucketAttention): chunkRung(Chunk, n), then halved (to ≥ minChunk) while
// chunk × heads × width exceeds the attention-score budget.
func (s *Scorer) chunkFor(n, width int) int {
	c := chunkRung(s.chunk, n, s.quarter)
	for c/2 >= minChunk && c*s.model.Config.NumAttentionHeads*width > s.scores {
		c /= 2
	}
	return c
}

// chunkRung is the chunk for rem remaining positions on the ladder top, top/2,
// top/4, … ≥ minChunk (top a power of two ≥ minChunk): top while rem ≥ top, else
// the smallest rung c ≥ rem, or c/2 when rem ≤ 3c/4 and c ≥ 8·minChunk (the rest,
// ≤ c/4, then takes a later rung: one more step saves ≥ c/4 ≥ 32 padded
// positions). A rollout of T positions so runs as at most 4T/3 + 2·minChunk
// positions: 256 as one chunk of 256, 300 as 256 + 64, 150 as 128 + 32, 400 as
// 512. With quarter, the ladder is top/4^k and the smallest rung ≥ min(rem, top)
// is taken, as before issue 42 (129…512 positions cost 512).
func chunkRung(top, rem int, quarter bool) int {
	c := top
	if quarter {
		for c/4 >= minChunk && c/4 >= rem {
			c /= 4
		}
		return c
	}
	for c/2 >= minChunk && c/2 >= rem {
		c /= 2
	}
	if rem < c && 4*rem <= 3*c && c >= 8*minChunk {
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
