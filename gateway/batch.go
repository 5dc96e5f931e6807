package gateway

import (
	"context"
	"slices"
	"sync"

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

	mu      sync.Mutex
	queue   []*genRequest
	running bool
	// batches and shared count the batches run and those of more than one row.
	batches, shared int64
}

// genRequest is one request's prompt and options, and where its answer goes.
type genRequest struct {
	prompt []int32
	opts   xla.SampleOptions
	done   chan genResult

	mu   sync.Mutex // orders the callbacks against the request going away
	gone bool       // the request ended (its context): no more callbacks
}

type genResult struct {
	sample xla.Sample
	err    error
}

// generate samples prompt with opts in the next batch. The batch runs whatever
// ctx does (other requests share it); a request whose ctx ends gets ctx's error
// at once and no more OnToken calls.
func (b *batcher) generate(ctx context.Context, prompt []int32, opts xla.SampleOptions) (xla.Sample, error) {
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
		n := min(len(b.queue), b.max)
		if n == 0 {
			b.running = false
			b.mu.Unlock()
			return
		}
		batch := slices.Clone(b.queue[:n])
		b.queue = b.queue[n:]
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
	opts := xla.SampleOptions{Stop: batch[0].opts.Stop, Rows: make([]xla.SampleOptions, len(batch))}
	for i, r := range batch {
		prompts[i], opts.Rows[i] = r.prompt, r.opts
		opts.MaxNew = max(opts.MaxNew, r.opts.MaxNew)
	}
	opts.OnToken = func(row int, tok int32, lp float32) {
		r := batch[row]
		if r.opts.OnToken == nil {
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.gone {
			r.opts.OnToken(0, tok, lp)
		}
	}
	out, err := b.sampler.Generate(context.Background(), prompts, opts)
	for i, r := range batch {
		if err != nil {
			r.done <- genResult{err: err}
		} else {
			r.done <- genResult{sample: out[i]}
		}
	}
}
