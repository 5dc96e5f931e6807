package xla

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// chunkNodes are a chunk step's first inputs (chunkArgs): the chunk's tokens and
// their targets (the next tokens), [batch, seq] int32, and its first position,
// scalar int32.
type chunkNodes struct{ tokens, targets, start *Node }

// takeChunk reads chunkArgs' inputs from l.
func takeChunk(l *list[*Node]) chunkNodes { return chunkNodes{l.next(), l.next(), l.next()} }

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

// tempArg is the temperature input of a scoring or training step (tempered).
func tempArg(t float64) *tensors.Tensor { return tensors.FromScalar(float32(t)) }

// newScoreExec returns a scoring step over the cache layout take reads: inputs
// chunkArgs, the temperature (tempArg: the logits are divided by it), then the
// cache; outputs the chunk's log-probs [1, seq], then what view
// keeps of the chunk's distributions (TeacherView.outputs: nothing for
// sampled_token), then the cache's outputs. Where the view takes inputs
// (TeacherView.nInputs: the student's ids), they follow chunkArgs, before the cache.
func newScoreExec(backend backends.Backend, m *Model, take func(*list[*Node]) graphCache, view TeacherView) (*modelExec, error) {
	cfg := m.Config
	return newModelExec(backend, m, func(ctx *mlctx.Context, in []*Node) []*Node {
		l := listOf(in)
		ch := takeChunk(l)
		temp := l.next()
		vin := l.take(view.nInputs())
		cache := take(l)
		hidden := decoder(ctx, cfg, ch.tokens, ch.start, cache)
		if view.nOutputs() == 0 {
			return append([]*Node{headPieces(ctx, cfg, hidden, ch.targets, temp)}, cache.outputs()...)
		}
		logits := tempered(headLogits(ctx, cfg, hidden), temp) // [1, seq, vocab]
		out := []*Node{targetLogProbs(logits, ch.targets)}
		out = append(out, view.outputs(Squeeze(logits, 0), vin)...)
		return append(out, cache.outputs()...)
	})
}

// headPiece is the most positions of a scoring chunk whose logits exist at once
// when only the targets' log-probs leave the step (headPieces).
const headPiece = 128

// headPieces returns the targets' log-probs under the tempered head, headPiece
// positions at a time: each piece's logits are made and reduced before the next
// piece's, so XLA gives them one buffer. A 256-position chunk of SmolLM2 held its
// [256, 49152] logits (48 MiB) in a 55 MiB block of temporaries, above the 32 MiB up
// to which glibc's malloc reuses freed memory: every execution mapped it afresh and
// faulted in its pages. In pieces the block is 28 MiB and is reused, and scoring
// 8 × 256 took 4% fewer CPU-seconds (docs/performance.md "The products themselves
// (session 14)"); not in a process that trains, where MallocThreshold maps every
// block above 128 KiB afresh, in pieces or not. A product at 128 rows is nearly as
// fast as at 256 (the MLP's: ~108 against ~113 GFLOP per CPU-second). A chunk of at
// most headPiece positions, or not a multiple of it, is one piece.
//
//	hidden: [1, seq, hidden]; targets: [1, seq] int32; temp: scalar → [1, seq]
func headPieces(ctx *mlctx.Context, cfg Config, hidden, targets, temp *Node) *Node {
	n := hidden.Shape().Dimensions[1]
	if n <= headPiece || n%headPiece != 0 {
		return targetLogProbs(tempered(headLogits(ctx, cfg, hidden), temp), targets)
	}
	var parts []*Node
	for lo := 0; lo < n; lo += headPiece {
		h := Slice(hidden, AxisRange(), AxisRange(lo, lo+headPiece))
		t := Slice(targets, AxisRange(), AxisRange(lo, lo+headPiece))
		parts = append(parts, targetLogProbs(tempered(headLogits(ctx, cfg, h), temp), t))
	}
	return Concatenate(parts, 1)
}

// newCache returns an empty cache: paged (pages are added as chunks run), or with
// BucketAttention a contiguous one with room for n positions, made on the device.
func (s *Scorer) newCache(n int) (*KVCache, error) {
	nl := s.model.Config.NumHiddenLayers
	if !s.bucket {
		return &KVCache{model: s.model, layout: newPagedCache(nl, s.chunk)}, nil
	}
	capacity := s.capacityFor(n)
	out, err := s.timedExec(s.caches.zeros, fmt.Sprintf("zeros %d", capacity), true, []any{lengthArg(capacity)})
	if err != nil {
		return nil, fmt.Errorf("new kv cache of %d: %w", capacity, err)
	}
	return &KVCache{model: s.model, layout: &contiguousCache{kv: takeKV(listOf(out), nl)}}, nil
}

// ensure grows c (a new set of tensors) so that it holds n positions.
func (s *Scorer) ensure(c *contiguousCache, n int) error {
	if n <= c.capacity() {
		return nil
	}
	capacity := s.capacityFor(n)
	args := append([]any{lengthArg(capacity)}, anys(c.kv.all())...)
	out, err := s.timedExec(s.caches.grow, fmt.Sprintf("grow %d→%d", c.capacity(), capacity), true, args)
	if err != nil {
		return fmt.Errorf("grow kv cache to %d: %w", capacity, err)
	}
	c.replace(takeKV(listOf(out), s.model.Config.NumHiddenLayers))
	return nil
}

// run feeds seq, at positions start…, through the model chunk by chunk, writing
// K/V into c (growing it as needed) and calling emit(i, lp) with lp = log p(seq[i+1]
// | …, seq[:i+1]) for i < len(seq)-1, p the policy at temperature temp (the
// logits divided by it; the K/V do not depend on it). With a sink, the chunks run sink's
// executables and sink.take gets each chunk's extra outputs.
func (s *Scorer) run(ctx context.Context, c *KVCache, seq []int32, start int, temp float64, emit func(i int, lp float32), sink *viewSink) error {
	if err := s.model.place(s.backend); err != nil {
		return err
	}
	s.stats.Passes++
	s.stats.Tokens += len(seq)
	var err error
	switch l := c.layout.(type) {
	case *pagedCache:
		err = s.runPaged(ctx, l, seq, start, temp, emit, sink)
	case *contiguousCache:
		err = s.runContiguous(ctx, l, seq, start, temp, emit, sink)
	default:
		err = errors.New("score: the KV cache is closed")
	}
	if err != nil {
		return err
	}
	c.Len = start + len(seq)
	return nil
}

// runContiguous is run for a contiguous cache (BucketAttention): every chunk
// attends over the cache's whole capacity bucket.
func (s *Scorer) runContiguous(ctx context.Context, c *contiguousCache, seq []int32, start int, temp float64, emit func(i int, lp float32), sink *viewSink) error {
	exec, label := s.step, "step"
	if sink != nil {
		exec, label = sink.step, sink.label+" step"
	}
	nl := s.model.Config.NumHiddenLayers
	for off := 0; off < len(seq); {
		if err := ctx.Err(); err != nil {
			return err
		}
		end := start + off + min(len(seq)-off, s.chunk) // past the widest chunk's last position
		n := s.chunkFor(len(seq)-off, max(c.capacity(), s.capacityFor(end)))
		if err := s.ensure(c, start+off+n); err != nil {
			return err
		}
		t0 := time.Now()
		capacity := c.capacity()
		s.count(n, capacity, capacity)
		args := append(append(append(chunkArgs(seq, off, n, start+off), tempArg(temp)), sink.inputs(off, n)...), c.args(s.backend)...)
		s.stats.CopySeconds += time.Since(t0).Seconds()
		out, err := s.timedExec(exec, fmt.Sprintf("%s %d@%d", label, n, capacity), false, args)
		if err != nil {
			return fmt.Errorf("score chunk at %d: %w", start+off, err)
		}
		r := listOf(out)
		s.emitChunk(r.next(), off, n, len(seq), emit)
		sink.consume(r, off, n)
		c.replace(takeKV(r, nl))
		off += n
	}
	return nil
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
