package xla

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
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
	// MinP drops the tokens whose probability (after temperature, top-k and top-p)
	// is below MinP times the most likely token's (0: none).
	MinP float64
	// LogitBias is added to the logits of its token ids before anything else (as
	// OpenAI's logit_bias: −100 bans a token, +100 all but forces it).
	LogitBias map[int32]float32
	// PresencePenalty and FrequencyPenalty are subtracted from the logit of every
	// token already sampled in this row, once and per time sampled (OpenAI's
	// presence_penalty and frequency_penalty, in [−2, 2]).
	PresencePenalty, FrequencyPenalty float64
	// RepetitionPenalty (> 0; 0 or 1: none) divides the positive logits and
	// multiplies the negative ones of every token in the prompt or sampled so far
	// (as transformers' and vLLM's repetition_penalty).
	RepetitionPenalty float64
	// TopLogProbs asks for the TopLogProbs most likely tokens of each step's
	// sampled distribution (Sample.Top), at most MaxTopLogProbs.
	TopLogProbs int
	// Stop ends a row when one of these ids is sampled (it is kept in the output).
	// A row of Rows stops at the top level's Stop and its own.
	Stop []int32
	// Gone, when it closes, stops the row before its next decode step with
	// StopGone (the client went away): its slot in the batch is freed, and a
	// call whose rows are all gone returns.
	Gone <-chan struct{}
	// Seed seeds row r's stream (PCG(Seed, r)): the same seed, prompts and backend
	// give the same tokens.
	Seed uint64
	// OnToken, when set, is called for each token as it is sampled (a stop token
	// included), in order within a row, on Generate's goroutine, with the log-prob
	// Sample.LogProbs will hold (and the step's Sample.Top entry, nil without
	// TopLogProbs): a server streams the reply while it is sampled. Decoding waits
	// for it to return.
	OnToken func(row int, tok int32, logProb float32, top []TokenLogProb)
	// Rows, when set (one per prompt), gives each row its own options (its Stop
	// adds to the top level's, its OnToken and Rows are ignored), so
	// unrelated requests share one batch; row r then draws from PCG(Rows[r].Seed,
	// 0), the stream it would have alone, and the top level's MaxNew must be their
	// largest.
	Rows []SampleOptions
}

// row returns row r's options.
func (o SampleOptions) row(r int) SampleOptions {
	if o.Rows == nil {
		return o
	}
	ro := o.Rows[r]
	ro.Stop, ro.OnToken, ro.Rows = append(slices.Clone(o.Stop), ro.Stop...), o.OnToken, nil
	return ro
}

// seedOf returns row r's random stream.
func (o SampleOptions) seedOf(r int) *rand.Rand {
	if o.Rows == nil {
		return rand.New(rand.NewPCG(o.Seed, uint64(r)))
	}
	return rand.New(rand.NewPCG(o.Rows[r].Seed, 0))
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
	case o.MinP < 0 || o.MinP > 1:
		return fmt.Errorf("sample options: min_p %g: want in [0, 1]", o.MinP)
	case o.RepetitionPenalty < 0:
		return fmt.Errorf("sample options: repetition_penalty %g: want > 0", o.RepetitionPenalty)
	case o.TopLogProbs < 0 || o.TopLogProbs > MaxTopLogProbs:
		return fmt.Errorf("sample options: top_logprobs %d: want in [0, %d]", o.TopLogProbs, MaxTopLogProbs)
	case math.IsNaN(o.PresencePenalty) || math.IsInf(o.PresencePenalty, 0) || math.IsNaN(o.FrequencyPenalty) || math.IsInf(o.FrequencyPenalty, 0):
		return fmt.Errorf("sample options: presence_penalty %g, frequency_penalty %g: want finite", o.PresencePenalty, o.FrequencyPenalty)
	}
	for id, b := range o.LogitBias {
		if math.IsNaN(float64(b)) || math.IsInf(float64(b), 0) {
			return fmt.Errorf("sample options: logit_bias[%d] %g: want finite", id, b)
		}
	}
	for r, ro := range o.Rows {
		if ro.Rows != nil {
			return fmt.Errorf("sample options: rows[%d]: rows of its own", r)
		}
		if err := ro.Validate(); err != nil {
			return fmt.Errorf("rows[%d]: %w", r, err)
		}
		if ro.MaxNew > o.MaxNew {
			return fmt.Errorf("sample options: rows[%d].max_new %d: above max_new %d", r, ro.MaxNew, o.MaxNew)
		}
	}
	return nil
}

// Why a row stopped.
const (
	StopToken   = "stop"    // sampled one of SampleOptions.Stop
	StopLength  = "length"  // reached MaxNew
	StopContext = "context" // reached max_position_embeddings
	StopGone    = "gone"    // SampleOptions.Gone closed: nobody waits for the row
)

// MaxTopLogProbs is the most SampleOptions.TopLogProbs (OpenAI's limit).
const MaxTopLogProbs = 20

// TokenLogProb is a token and its log-prob (nats).
type TokenLogProb struct {
	Token   int32
	LogProb float32
}

// Sample is what Generate returns for one prompt.
type Sample struct {
	Tokens []int32 // the sampled tokens (a stop token included)
	// LogProbs[i] is log q(Tokens[i]) under the distribution actually sampled from:
	// the logits with LogitBias and the penalties applied, divided by T, restricted
	// to top-k, top-p and min-p and renormalised (0 when greedy).
	LogProbs []float32
	// Top[i], with SampleOptions.TopLogProbs, holds the most likely tokens of step
	// i's distribution q, most likely first: at most TopLogProbs, and only tokens q
	// can sample (one, the token itself with 0, when greedy).
	Top [][]TokenLogProb
	// PolicyLogProbs[i] is log π(Tokens[i] | prompt, Tokens[:i]) at temperature 1
	// without truncation: what Scorer.Score gives for the same sequence.
	PolicyLogProbs []float32
	Reason         string // StopToken, StopLength or StopContext
}

// Sampler generates from a Model with a KV cache, a Batch of rows at a time
// (sampler_batch.go): each row's prompt but its last token is prefilled through
// the scorer's paged pass, a chunk per step, then joins the rows decoding, which
// share one decodeCache and each feed one token per step at their own position;
// the next token is sampled on the host. The decoding cache's capacity is a
// power-of-two bucket, doubled when a row reaches it, so decoding reuses one
// executable per (rows, capacity bucket) and never recompiles per position. A
// Sampler runs one Generate or Batch step at a time (it owns the device); calls
// serialise.
type Sampler struct {
	model   *Model
	backend backends.Backend
	mu      sync.Mutex
	// scorer's paged cache, chunk buckets and flatten serve the prefill; its chunk
	// is the prefill's.
	scorer  *Scorer
	prefill *modelExec // chunkArgs, a paged cache → Σhidden, the written pages
	// prefillFlat is the prefill of one-chunk prompts of one length: tokens
	// [rows, n], start, a contiguous cache of rows → Σhidden, the cache; zerosRows
	// makes that cache empty.
	prefillFlat, zerosRows *modelExec
	// dec decodes: the step and the executables that join, cut, merge and resize
	// the decoding rows' cache (kvcache_decode.go).
	dec decodeExecs
}

// NewSampler returns a Sampler of m on backend. chunk bounds the prefill's
// positions per step (0: DefaultChunk).
func NewSampler(backend backends.Backend, m *Model, chunk int) (*Sampler, error) {
	sc, err := NewScorer(backend, m, ScorerOptions{Chunk: chunk})
	if err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	s := &Sampler{model: m, backend: backend, scorer: sc}
	if s.dec, err = newDecodeExecs(backend, m); err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	if err := s.newBatchExecs(); err != nil {
		return nil, fmt.Errorf("new sampler: %w", err)
	}
	return s, nil
}

// Model is the model the Sampler runs.
func (s *Sampler) Model() *Model { return s.model }

// Generate samples a continuation of every prompt (token ids; lengths may differ,
// each ≥ 1) and returns one Sample per prompt, in order. The rows run as one Batch:
// each row's answer is what it gives alone.
func (s *Sampler) Generate(ctx context.Context, prompts [][]int32, opts SampleOptions) ([]Sample, error) {
	if err := opts.Validate(); err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	if len(prompts) == 0 {
		return nil, errors.New("generate: no prompts")
	}
	if opts.Rows != nil && len(opts.Rows) != len(prompts) {
		return nil, fmt.Errorf("generate: %d row options for %d prompts", len(opts.Rows), len(prompts))
	}
	b := s.NewBatch()
	defer b.Close()
	for r, p := range prompts {
		if err := b.Add(r, p, opts.row(r), opts.seedOf(r)); err != nil {
			return nil, err
		}
	}
	out := make([]Sample, len(prompts))
	for b.Len() > 0 {
		fin, err := b.Step(ctx)
		if err != nil {
			return nil, err
		}
		for _, f := range fin {
			out[f.ID] = f.Sample
		}
	}
	return out, nil
}

// checkPrompt checks prompt i: not empty, shorter than max_position_embeddings,
// ids inside the vocabulary.
func (s *Sampler) checkPrompt(i int, p []int32) error {
	maxPos, vocab := s.model.Config.MaxPositionEmbeddings, int32(s.model.Config.VocabSize)
	if len(p) == 0 {
		return fmt.Errorf("generate: prompt %d is empty", i)
	}
	if len(p) >= maxPos {
		return fmt.Errorf("generate: prompt %d has %d tokens, max_position_embeddings is %d: %w", i, len(p), maxPos, ErrTooLong)
	}
	for j, t := range p {
		if t < 0 || t >= vocab {
			return fmt.Errorf("generate: prompt %d: token %d at position %d is outside the vocabulary [0, %d)", i, t, j, vocab)
		}
	}
	return nil
}
