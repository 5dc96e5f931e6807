package xla

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Batch is a continuous batch on a Sampler: rows join and leave between steps, so
// a long prompt never holds up the rows already decoding, and a row that is done
// (or gone) frees its place at once. Each Step runs one prefill chunk of a row
// still prefilling (round robin, so a short prompt behind a long one is not kept
// waiting for the long one's whole prefill), then one decode step of every
// decoding row:
//
//   - a prompt of more than one chunk is prefilled through the scorer's paged
//     pass (a chunk of up to Chunk positions attends to the pages before it in
//     blocks: docs/design.md "Long rollouts"), into the row's own paged cache,
//     without the vocabulary head; when the row's prompt but its last token is
//     in, its pages are flattened into a contiguous [capacity, 1, kv, hd] cache
//     and joined to the batch's; a shorter prompt is prefilled in one step
//     straight into a contiguous cache of its bucket;
//   - decoding rows share one decodeCache (rows first, a step reads the cache
//     and returns only a small buffer of its latest positions), each at its own
//     position (decodeStep); rows that stop are cut out of it.
//
// A Batch belongs to one goroutine; its Steps take the Sampler's lock, so other
// Generate calls interleave with them.
type Batch struct {
	s       *Sampler
	cache   *decodeCache // the decoding rows' K/V, in rows' order; nil: none
	rows    []*batchRow  // decoding
	waiting []*batchRow  // prefilling, in arrival order
	scratch pickScratch
}

// batchRow is one row of a Batch.
type batchRow struct {
	id      int
	prompt  []int32
	opts    SampleOptions // this row's (SampleOptions.row)
	rng     *rand.Rand
	hist    *history
	out     Sample
	pre     *KVCache // the paged prefill, while waiting
	off     int      // prompt positions prefilled
	cur     int32    // the token to feed next
	pos     int32    // its position
	started bool     // a token was sampled
}

// Finished is a row of a Batch that stopped: its id (Add's) and its sample.
type Finished struct {
	ID     int
	Sample Sample
}

// NewBatch returns an empty Batch.
func (s *Sampler) NewBatch() *Batch { return &Batch{s: s} }

// Len is the number of rows not finished (prefilling or decoding).
func (b *Batch) Len() int { return len(b.rows) + len(b.waiting) }

// Add queues prompt for prefill with o (its Rows ignored; o.OnToken is called with
// row = id) and rng, the row's random stream (nil: PCG(o.Seed, 0)).
func (b *Batch) Add(id int, prompt []int32, o SampleOptions, rng *rand.Rand) error {
	if err := b.s.checkPrompt(id, prompt); err != nil {
		return err
	}
	o.Rows = nil
	if err := o.Validate(); err != nil {
		return fmt.Errorf("generate: row %d: %w", id, err)
	}
	if rng == nil {
		rng = rand.New(rand.NewPCG(o.Seed, 0))
	}
	// Once per row, not per step: on the pure-Go backend a weight's buffer is the
	// host's, so place moves it again each time (and frees the OS memory).
	if err := b.s.model.place(b.s.backend); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	b.waiting = append(b.waiting, &batchRow{id: id, prompt: prompt, opts: o, rng: rng, hist: newHistory(prompt, o),
		cur: prompt[len(prompt)-1], pos: int32(len(prompt) - 1)})
	return nil
}

// Close frees the Batch's device memory; its rows are dropped.
func (b *Batch) Close() {
	for _, r := range b.waiting {
		r.pre.Close()
	}
	if b.cache != nil {
		b.cache.close()
	}
	b.cache, b.rows, b.waiting = nil, nil, nil
}

// Step runs one prefill chunk (if a row is prefilling) and one decode step (if
// rows are decoding), and returns the rows that stopped: gone (StopGone, checked
// first), or by Stop, MaxNew or the context.
func (b *Batch) Step(ctx context.Context) ([]Finished, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var fin []Finished
	b.waiting = slices.DeleteFunc(b.waiting, func(r *batchRow) bool {
		if gone(r.opts.Gone) {
			r.pre.Close()
			r.out.Reason = StopGone
			fin = append(fin, Finished{r.id, r.out})
			return true
		}
		return false
	})
	for _, r := range b.rows {
		if r.out.Reason == "" && gone(r.opts.Gone) {
			r.out.Reason = StopGone
		}
	}
	if len(b.waiting) > 0 {
		r := b.waiting[0]
		if err := b.prefillChunk(r); err != nil {
			return nil, err
		}
		if len(b.waiting) > 0 && b.waiting[0] == r { // round robin: a short prompt behind a long one joins soon
			b.waiting = append(b.waiting[1:], r)
		}
	}
	if err := b.decode(); err != nil {
		return nil, err
	}
	return append(fin, b.leave()...), nil
}

// prefillChunk runs one chunk of r's prefill; once r's prompt but its last token
// is in, r joins the decoding rows.
func (b *Batch) prefillChunk(r *batchRow) error {
	s := b.s
	n := len(r.prompt) - 1 // positions to prefill: the last token is fed by decoding
	if n <= s.scorer.chunk && r.pre == nil {
		// One chunk: straight into a contiguous cache of the row's bucket (a page of
		// Chunk positions and its flattening cost more than the attention saved).
		// Every waiting row with a prompt of the same length comes along, as one
		// batch: each weight is read once for all of them.
		var group []*batchRow
		var seqs [][]int32
		for _, w := range b.waiting {
			if w.pre == nil && len(w.prompt)-1 == n {
				group, seqs = append(group, w), append(seqs, w.prompt[:n])
			}
		}
		one, err := s.prefillContiguous(seqs)
		if err != nil {
			return fmt.Errorf("generate: row %d: %w", r.id, err)
		}
		b.waiting = slices.DeleteFunc(b.waiting, func(w *batchRow) bool { return slices.Contains(group, w) })
		return b.join(one, group...)
	}
	if r.pre == nil {
		r.pre = &KVCache{model: s.model, layout: newPagedCache(s.model.Config.NumHiddenLayers, s.scorer.chunk)}
	}
	if r.off < n {
		size, err := s.prefillPaged(r.pre, r.prompt[:n], r.off)
		if err != nil {
			return err
		}
		r.off += size
		r.pre.Len = min(r.off, n)
		if r.off < n {
			return nil
		}
	}
	flat, err := s.scorer.flatten(r.pre)
	if err != nil {
		return fmt.Errorf("generate: row %d: %w", r.id, err)
	}
	r.pre.layout, r.pre = nil, nil // flat is the row's cache now
	b.waiting = b.waiting[1:]
	return b.join(flat, r)
}

// decodeHeadroom is how many new tokens a row's first cache bucket holds beyond
// its prompt (more are reached by doubling): a row with a large MaxNew that stops
// early does not pay for (or attend over) MaxNew positions.
const decodeHeadroom = 256

// minCapacity is the smallest decoding cache bucket.
const minCapacity = 64

// capacityBucket is the power of two ≥ n (and ≥ minCapacity).
func capacityBucket(n int) int {
	c := minCapacity
	for c < n {
		c *= 2
	}
	return c
}

// join adds rs, whose keys and values are one's rows (in order; one is freed), to
// the decoding rows. Pages make a flattened prefill a multiple of the chunk (512):
// join cuts it to what the rows need soon, so a short prompt does not decode over
// 512 positions.
func (b *Batch) join(one *contiguousCache, rs ...*batchRow) error {
	s := b.s
	want := 0
	base := make([]int32, len(rs))
	for i, r := range rs {
		want = max(want, capacityBucket(len(r.prompt)+min(r.opts.MaxNew, decodeHeadroom)))
		base[i] = r.pos
	}
	if b.cache == nil {
		c, err := s.adoptCache(one, want, base)
		if err != nil {
			return fmt.Errorf("generate: join row %d: %w", rs[0].id, err)
		}
		b.cache, b.rows = c, rs
		return nil
	}
	if err := b.mergeCache(); err != nil {
		one.close()
		return err
	}
	capacity := max(b.cache.capacity(), want)
	if capacity > b.cache.capacity() {
		if err := b.resizeCache(capacity); err != nil {
			one.close()
			return err
		}
	}
	c, err := s.adoptCache(one, capacity, base)
	if err != nil {
		return fmt.Errorf("generate: join row %d: %w", rs[0].id, err)
	}
	out, err := s.dec.join.Exec(append(anys(b.cache.tensors()), anys(c.tensors())...)...)
	if err != nil {
		c.close()
		return fmt.Errorf("generate: join row %d: %w", rs[0].id, err)
	}
	finalize(b.cache.tensors())
	nl := len(c.main.K)
	l := listOf(out)
	b.cache.main, b.cache.recent = takeKV(l, nl), takeKV(l, nl)
	b.cache.base = append(b.cache.base, c.base...)
	c.close()
	b.rows = append(b.rows, rs...)
	return nil
}

// leave cuts the stopped rows out of the decoding rows and their cache, and
// returns them.
func (b *Batch) leave() []Finished {
	var fin []Finished
	var keep []int32
	for i, r := range b.rows {
		if r.out.Reason != "" {
			fin = append(fin, Finished{r.id, r.out})
		} else {
			keep = append(keep, int32(i))
		}
	}
	switch {
	case len(fin) == 0:
		return nil
	case len(keep) == 0:
		b.cache.close()
		b.cache, b.rows = nil, nil
		return fin
	}
	rows := make([]*batchRow, len(keep))
	for j, i := range keep {
		rows[j] = b.rows[i]
	}
	if err := b.keepRows(keep); err != nil {
		// The rows are kept (decoding them is wasted work, not a wrong answer)
		// until the next leave succeeds.
		return fin
	}
	b.rows = rows
	// A long row that left no longer sets the capacity: cut it to what the rows
	// left need soon (each row's positions so far, in main or recent, stay below it).
	need := 0
	for _, r := range rows {
		need = max(need, int(r.pos)+1+min(r.opts.MaxNew-len(r.out.Tokens), decodeHeadroom))
	}
	if want := capacityBucket(need); want < b.cache.capacity() {
		b.resizeCache(want) // on failure the cache stays larger: only slower
	}
	return fin
}

// decode feeds every decoding row its current token at its position and samples
// its next.
func (b *Batch) decode() error {
	live := 0
	for _, r := range b.rows {
		if r.out.Reason == "" {
			live++
		}
	}
	if live == 0 {
		return nil
	}
	s, c := b.s, b.cache
	if c.used == recentSlots {
		if err := b.mergeCache(); err != nil {
			return err
		}
	}
	n := len(b.rows)
	cur, pos := make([]int32, n), make([]int32, n)
	for i, r := range b.rows {
		cur[i], pos[i] = r.cur, c.pos(i)
		if r.out.Reason == "" && r.pos != pos[i] {
			return fmt.Errorf("decode: row %d at position %d, its cache at %d", r.id, r.pos, pos[i])
		}
	}
	// main is read and kept; recent is donated (the step returns its successor).
	args := append([]any{tensors.FromFlatDataAndDimensions(cur, n), tensors.FromFlatDataAndDimensions(pos, n), tensors.FromScalar(int32(c.used))}, anys(c.main.all())...)
	for _, t := range c.recent.all() {
		args = append(args, donated(t, s.backend))
	}
	res, err := s.dec.step.Exec(args...)
	if err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	l := listOf(res)
	lt := l.next()
	logits := tensors.MustCopyFlatData[float32](lt)
	lt.FinalizeAll()
	finalize(c.recent.all()) // what donation left of them
	c.recent = takeKV(l, len(c.recent.K))
	c.used++
	vocab, maxPos := s.model.Config.VocabSize, s.model.Config.MaxPositionEmbeddings
	for i, r := range b.rows {
		if r.out.Reason != "" {
			continue
		}
		raw := logits[i*vocab : (i+1)*vocab]
		adj := adjust(raw, r.opts, r.hist, &b.scratch)
		tok, lp, plp := pick(adj, r.opts, r.rng, &b.scratch)
		if &adj[0] != &raw[0] { // the policy's log-prob is the unadjusted model's
			plp = float64(raw[tok]) - logSumExp(raw, 1, float64(slices.Max(raw)))
		}
		r.hist.add(tok)
		o := &r.out
		o.Tokens = append(o.Tokens, tok)
		o.LogProbs = append(o.LogProbs, float32(lp))
		o.PolicyLogProbs = append(o.PolicyLogProbs, float32(plp))
		var top []TokenLogProb
		if r.opts.TopLogProbs > 0 {
			top = b.scratch.top(r.opts.TopLogProbs)
			o.Top = append(o.Top, top)
		}
		if r.opts.OnToken != nil {
			r.opts.OnToken(r.id, tok, float32(lp), top)
		}
		switch {
		case slices.Contains(r.opts.Stop, tok):
			o.Reason = StopToken
		case len(o.Tokens) == r.opts.MaxNew:
			o.Reason = StopLength
		case int(r.pos)+2 >= maxPos: // the token just sampled sits at pos+1, the last position
			o.Reason = StopContext
		default:
			r.cur, r.pos = tok, r.pos+1
		}
	}
	return nil
}

// prefillPaged runs the chunk of seq from off through the model into c's pages
// (positions off…), without the vocabulary head, and returns the chunk's length
// (it may reach past seq: those positions are padding, overwritten by decoding
// before any query sees them).
func (s *Sampler) prefillPaged(c *KVCache, seq []int32, off int) (int, error) {
	sc := s.scorer
	p := c.layout.(*pagedCache)
	zero, err := sc.zeroPageTensor()
	if err != nil {
		return 0, err
	}
	past := spanFor(off, p.size)
	n := sc.chunkFor(len(seq)-off, max(past.Block, p.size))
	args := append(chunkArgs(seq, off, n, off), p.stepArgs(off, past, zero)...)
	sc.count(n, -1, n+past.Len())
	out, err := sc.timedExec(s.prefill, fmt.Sprintf("prefill %d span %d×%d", n, past.Blocks, past.Block), false, args)
	if err != nil {
		return 0, fmt.Errorf("prefill chunk at %d: %w", off, err)
	}
	r := listOf(out)
	r.next().FinalizeAll()
	p.write(takeWritten(r, s.model.Config.NumHiddenLayers), off, n)
	return n, nil
}

// prefillContiguous returns a [size, len(seqs), kv, hd] cache holding each seq's
// keys and values at positions 0… in its row, in one step (seqs of one length
// n ≤ Chunk; size is the power of two ≥ n, ≥ minChunk; padding after them is
// overwritten by decoding before any query sees it). The cache is the chunk's
// size, not the decoding capacity (join pads it to that): the chunk's queries
// attend over its own positions only, where a cache of the capacity bucket had
// them attend (masked) over up to twice as many.
func (s *Sampler) prefillContiguous(seqs [][]int32) (*contiguousCache, error) {
	sc := s.scorer
	rows := len(seqs)
	n := len(seqs[0])
	size := minChunk
	for size < n {
		size *= 2
	}
	out, err := sc.timedExec(s.zerosRows, fmt.Sprintf("zeros %d×%d", size, rows), true, []any{lengthArg(size), lengthArg(rows)})
	if err != nil {
		return nil, fmt.Errorf("new kv cache of %d×%d: %w", size, rows, err)
	}
	c := &contiguousCache{kv: takeKV(listOf(out), s.model.Config.NumHiddenLayers)}
	if n == 0 {
		return c, nil
	}
	tok := make([]int32, rows*size)
	for i, seq := range seqs {
		copy(tok[i*size:], seq)
	}
	args := []any{tensors.FromFlatDataAndDimensions(tok, rows, size), tensors.FromScalar(int32(0))}
	res, err := s.prefillFlat.Exec(append(args, c.args(s.backend)...)...)
	if err != nil {
		c.close()
		return nil, fmt.Errorf("prefill: %w", err)
	}
	l := listOf(res)
	l.next().FinalizeAll()
	c.replace(takeKV(l, len(c.kv.K)))
	return c, nil
}

// newBatchExecs makes the Sampler's prefill steps.
func (s *Sampler) newBatchExecs() error {
	m := s.model
	cfg, nl := m.Config, m.Config.NumHiddenLayers
	var err error
	// chunkArgs, then a paged cache → Σhidden (the pure-Go backend of v0.26.0
	// panics running a graph with nodes no output uses), the written pages.
	s.prefill, err = newModelExec(s.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		ch := takeChunk(l)
		cache := takePaged(l, nl)
		h := decoder(ctx, cfg, ch.tokens, ch.start, cache)
		sum := Add(ReduceAllSum(h), ReduceAllSum(ConvertDType(ch.targets, h.DType())))
		return append([]*Node{sum}, cache.outputs()...)
	})
	if err != nil {
		return err
	}
	// lengthArg(capacity), lengthArg(rows) → an empty contiguous cache of rows.
	s.zerosRows, err = newModelExec(s.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		capacity, rows := lengthOf(l.next()), lengthOf(l.next())
		out := make([]*Node, 2*nl)
		for i := range out {
			out[i] = Zeros(in[0].Graph(), shapes.Make(m.cacheDType(), capacity, rows, cfg.NumKeyValueHeads, cfg.HeadDim))
		}
		return out
	})
	if err != nil {
		return err
	}
	// tokens [rows, n], start, a contiguous cache of rows → Σhidden, the cache written.
	s.prefillFlat, err = newModelExec(s.backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		tokens, start := l.next(), l.next()
		cache := takeContiguous(l, nl)
		h := decoder(ctx, cfg, tokens, start, cache)
		return append([]*Node{ReduceAllSum(h)}, cache.outputs()...)
	})
	if err != nil {
		return err
	}
	return nil
}
