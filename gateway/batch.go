package gateway

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/xla"
)

// batcher puts the requests that wait for one sampler into one Generate call: a
// runner goroutine takes everything queued (up to max rows), samples it as one
// batch with each row's own options (xla.SampleOptions.Rows: every answer is
// what it would be alone), hands each request its row, and goes on while more are
// queued. Requests that come while a batch runs form the next one, so under load
// the sampler runs full batches, and alone a request goes at once.
type batcher struct {
	sampler *xla.Sampler
	max     int

	log zerolog.Logger

	mu      sync.Mutex
	queue   []*genRequest
	running bool
	// batches and shared count the batches run and those of more than one row.
	batches, shared int64
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

// run samples batches until the queue is empty.
func (b *batcher) run() {
	for {
		b.mu.Lock()
		var batch []*genRequest
		for len(b.queue) > 0 && len(batch) < b.max {
			r := b.queue[0]
			b.queue = b.queue[1:]
			if gone(r.opts.Gone) {
				b.dropped.Add(1)
				b.log.Info().Int("prompt_tokens", len(r.prompt)).Int("tokens", 0).Msg("sampler row dropped: the client went away")
				continue
			}
			batch = append(batch, r)
		}
		n := len(batch)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.batches++
		if n > 1 {
			b.shared++
		}
		b.mu.Unlock()
		b.sample(batch)
	}
}

// sample runs one batch and answers its requests.
func (b *batcher) sample(batch []*genRequest) {
	prompts := make([][]int32, len(batch))
	opts := xla.SampleOptions{Rows: make([]xla.SampleOptions, len(batch))} // each row's own Stop
	for i, r := range batch {
		prompts[i], opts.Rows[i] = r.prompt, r.opts
		opts.MaxNew = max(opts.MaxNew, r.opts.MaxNew)
	}
	opts.OnToken = func(row int, tok int32, lp float32, top []xla.TokenLogProb) {
		r := batch[row]
		if r.opts.OnToken == nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.gone {
			r.opts.OnToken(0, tok, lp, top)
		}
	}
	out, err := b.sampler.Generate(context.Background(), prompts, opts)
	for i, r := range batch {
		if err != nil {
			r.done <- genResult{err: err}
			continue
		}
		if out[i].Reason == xla.StopGone {
			b.dropped.Add(1)
			b.log.Info().Int("prompt_tokens", len(r.prompt)).Int("tokens", len(out[i].Tokens)).Int("max_tokens", r.opts.MaxNew).
				Msg("sampler row dropped: the client went away")
		}
		r.done <- genResult{sample: out[i]}
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
