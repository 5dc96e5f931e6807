package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/gomlx/gomlx/backends"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/xla"
)

// policy is one servable model: its sampler, tokenizer and chat template. A
// request loads the current one once and uses it to the end, so a swap never
// changes a turn in flight.
type policy struct {
	dir      string
	step     int64
	sampler  *xla.Sampler
	tok      tokenizer.Tokenizer
	template *chatTemplate
	// maxPos is the context served: the model's max_position_embeddings (modelMax),
	// bounded by gateway.max_context_tokens.
	maxPos, modelMax int
	stops            []int32   // turn-end token ids: sampling stops at them
	up               *upstream // non-nil: an engine samples (sampler is nil)
	batch            *batcher  // batches the requests waiting for sampler
}

// generate samples one reply to prompt, on the embedded sampler or the upstream
// engine.
func (p *policy) generate(ctx context.Context, prompt []int32, o xla.SampleOptions) (xla.Sample, error) {
	if p.up != nil {
		return p.up.generate(ctx, prompt, o, p.tok.VocabSize())
	}
	return p.batch.generate(ctx, prompt, o)
}

// policies holds the serving policy and swaps in the newest checkpoint.
type policies struct {
	cur       atomic.Pointer[policy]
	backend   backends.Backend
	precision xla.Precision
	initial   string // the model directory used until a checkpoint exists
	root      string // the checkpoint root whose `latest` link is followed
	up        *upstream
	batch     int          // gateway.max_batch
	context   int          // gateway.max_context_tokens
	dropped   atomic.Int64 // rows dropped by the batchers: the client went away
	log       zerolog.Logger

	// With gateway.ab: the policies of the arms and of the checkpoints open
	// sessions are pinned to, by directory and upstream model (ab_serve.go).
	mu     sync.Mutex
	loaded map[armKey]*policy
}

// refresh loads the checkpoint `latest` names (or the initial model the first
// time) when it differs from the one serving, and swaps it in atomically.
func (p *policies) refresh() error {
	dir, step, ok := p.newest()
	if !ok {
		return nil
	}
	if cur := p.cur.Load(); cur != nil && cur.dir == dir {
		return nil
	}
	np, err := p.open(dir, step)
	if err != nil {
		return err
	}
	p.cur.Store(np)
	p.log.Info().Str("model", dir).Int64("policy_version", step).Str("chat_template", np.template.source).Msg("serving policy")
	return nil
}

// newest returns the checkpoint `latest` names when it verifies, else the initial
// model directory (step 0) while nothing serves yet; ok is false when a checkpoint
// that does not verify should leave the serving policy as it is.
func (p *policies) newest() (dir string, step int64, ok bool) {
	dir, step = p.initial, 0
	if p.root == "" {
		return dir, step, true
	}
	target, err := os.Readlink(filepath.Join(p.root, checkpoint.LatestLinkName))
	if err != nil {
		return dir, step, true
	}
	ck := filepath.Join(p.root, target)
	if cur := p.cur.Load(); cur != nil && cur.dir == ck {
		return ck, cur.step, true
	}
	if st, err := checkpoint.Verify(ck); err == nil {
		return ck, st.Step, true
	} else if p.cur.Load() != nil {
		p.log.Warn().Err(err).Str("checkpoint", ck).Msg("latest checkpoint does not verify; keeping the policy serving")
		return "", 0, false
	}
	return dir, step, true
}

func (p *policies) open(dir string, step int64) (*policy, error) {
	if p.up != nil {
		return p.openUpstream(dir, step, p.up)
	}
	m, err := xla.Open(dir, xla.OpenOptions{Precision: p.precision})
	if err != nil {
		return nil, fmt.Errorf("open policy %s: %w", dir, err)
	}
	tok := m.Tokenizer()
	tmpl, err := loadTemplate(dir, tok)
	if err != nil {
		return nil, err
	}
	s, err := xla.NewSampler(p.backend, m, 0)
	if err != nil {
		return nil, fmt.Errorf("open policy %s: %w", dir, err)
	}
	mp := m.Config.MaxPositionEmbeddings
	return withStops(&policy{dir: dir, step: step, sampler: s, tok: tok, template: tmpl, maxPos: min(mp, p.context), modelMax: mp,
		batch: &batcher{sampler: s, max: max(p.batch, 1), log: p.log, dropped: &p.dropped}})
}

// openUpstream is open when an engine samples: the tokenizer, chat template and
// context length come from the initial model directory (training changes none of
// them, and a LoRA checkpoint holds only the adapter), nothing is loaded for
// sampling; the step is the checkpoint's, which the engine hooks push to the engine.
func (p *policies) openUpstream(dir string, step int64, up *upstream) (*policy, error) {
	if cur := p.cur.Load(); cur != nil {
		np := *cur
		np.dir, np.step, np.up = dir, step, up
		return &np, nil
	}
	md, err := data.OpenModelDir(p.initial)
	if err != nil {
		return nil, fmt.Errorf("open tokenizer for gateway.upstream: %w", err)
	}
	defer md.Close()
	tmpl, err := loadTemplate(p.initial, md.Tokenizer)
	if err != nil {
		return nil, err
	}
	mp := md.Config.MaxPositionEmbeddings
	return withStops(&policy{dir: dir, step: step, tok: md.Tokenizer, template: tmpl, maxPos: min(mp, p.context), modelMax: mp, up: up})
}

// withStops sets np's turn-end token ids from its template.
func withStops(np *policy) (*policy, error) {
	dir, tmpl, tok := np.dir, np.template, np.tok
	for _, name := range tmpl.stopTokens {
		id, _ := tok.SpecialID(name)
		np.stops = append(np.stops, id)
	}
	if len(np.stops) == 0 {
		return nil, fmt.Errorf("open policy %s: the tokenizer has no turn-end token (eos_token, <|end|>, <|im_end|>, <|eot_id|>, <|endoftext|>)", dir)
	}
	return np, nil
}
