package gateway

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/xla"
)

// batcher runs the requests for one sampler in one continuous batch (xla.Batch):
// a runner goroutine adds what is queued whenever the batch has fewer than max
// rows, steps it (one prefill chunk of the next new row, one decode step of every
// decoding row), and answers each request as soon as its row stops, so a long
// prompt or a long reply never holds up the others, and alone a request goes at
// once. Every row keeps its own options and random stream: each answer is what
// it would be alone.
type batcher struct {
	sampler *xla.Sampler
	max     int

	log zerolog.Logger

	mu      sync.Mutex
	queue   []*genRequest
	running bool
	// steps and shared count the batch's steps and those with more than one row.
	steps, shared int64
	// dropped counts the rows stopped because their client went away (waiting or
	// sampling: xla.StopGone), across the policies' batchers.
	dropped *atomic.Int64
}

// genRequest is one request's prompt and options, and where its answer goes.
type genRequest struct {
	prompt []int32
	opts   xla.SampleOptions // opts.Gone is the request's ctx.Done()
	done   chan genResult

	mu   sync.Mutex // orders the callbacks against the request going away
	gone bool       // the request ended (its context): no more callbacks
}

type genResult struct {
	sample xla.Sample
	err    error
}

// generate samples prompt with opts in the next batch. A request whose ctx ends
// (the client went away) gets ctx's error at once and no more OnToken calls, and
// its row is dropped: never started if it still waits, else stopped before the
// batch's next decode step (xla.SampleOptions.Gone), so the others go on without it.
func (b *batcher) generate(ctx context.Context, prompt []int32, opts xla.SampleOptions) (xla.Sample, error) {
	opts.Gone = ctx.Done()
	req := &genRequest{prompt: prompt, opts: opts, done: make(chan genResult, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, req)
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case res := <-req.done:
		return res.sample, res.err
	case <-ctx.Done():
		req.mu.Lock()
		req.gone = true
		req.mu.Unlock()
		return xla.Sample{}, ctx.Err()
	}
}

// run samples until nothing is queued or sampling: a continuous batch
// (xla.Batch) that requests join as soon as it has room (max rows), each
// prefilled a chunk per step beside the rows decoding, and leave as soon as
// they stop, each answered then.
func (b *batcher) run() {
	batch := b.sampler.NewBatch()
	defer batch.Close()
	live := map[int]*genRequest{}
	next := 0
	for {
		b.mu.Lock()
		for len(b.queue) > 0 && batch.Len() < b.max {
			r := b.queue[0]
			b.queue = b.queue[1:]
			if gone(r.opts.Gone) {
				b.dropped.Add(1)
				b.log.Info().Int("prompt_tokens", len(r.prompt)).Int("tokens", 0).Msg("sampler row dropped: the client went away")
				continue
			}
			opts := r.opts
			opts.OnToken = func(_ int, tok int32, lp float32, top []xla.TokenLogProb) {
				if r.opts.OnToken == nil {
					return
				}
				r.mu.Lock()
				defer r.mu.Unlock()
				if !r.gone {
					r.opts.OnToken(0, tok, lp, top)
				}
			}
			if err := batch.Add(next, r.prompt, opts, nil); err != nil {
				r.done <- genResult{err: err}
				continue
			}
			live[next] = r
			next++
		}
		if batch.Len() == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.steps++
		if batch.Len() > 1 {
			b.shared++
		}
		b.mu.Unlock()
		fin, err := batch.Step(context.Background())
		if err != nil { // the device failed: every row in the batch fails with it
			for id, r := range live {
				r.done <- genResult{err: err}
				delete(live, id)
			}
			batch.Close()
			batch = b.sampler.NewBatch()
			continue
		}
		for _, f := range fin {
			r := live[f.ID]
			delete(live, f.ID)
			if f.Sample.Reason == xla.StopGone {
				b.dropped.Add(1)
				b.log.Info().Int("prompt_tokens", len(r.prompt)).Int("tokens", len(f.Sample.Tokens)).Int("max_tokens", r.opts.MaxNew).
					Msg("sampler row dropped: the client went away")
			}
			r.done <- genResult{sample: f.Sample}
		}
	}
}

// gone reports whether done is closed.
func gone(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}
