package xla

import (
	"context"
	"fmt"
	"math"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// maxBatchPositions bounds rows × positions of one ScoreBatch step: its logits are
// [rows, positions, vocab] at once (403 MB of float32 for 8 × 256 at SmolLM2's
// 49,152 tokens), where a Score chunk holds one chunk's.
const maxBatchPositions = 2048

// ScoreBatch returns ScoreAt's log-probs (entry 0 NaN) for each of rollouts, which
// all have one length n ≤ Chunk, without KV caches: the rollouts run as one
// [rows, n] step, up to maxBatchPositions positions a step, each attending to
// itself, so every weight is read once for all of them, where Score runs a step
// per rollout. It is what a scoring pass over a group of short rollouts of one
// length can use when it needs no cache.
func (s *Scorer) ScoreBatch(ctx context.Context, rollouts [][]int32, temp float64) ([][]float32, error) {
	if !(temp > 0) || math.IsInf(temp, 0) {
		return nil, fmt.Errorf("score batch: temperature %g: want a finite value > 0", temp)
	}
	if len(rollouts) == 0 {
		return nil, nil
	}
	n := len(rollouts[0])
	for i, r := range rollouts {
		if len(r) != n {
			return nil, fmt.Errorf("score batch: rollout %d has %d tokens, rollout 0 %d: want one length", i, len(r), n)
		}
		if err := s.checkTokens(r); err != nil {
			return nil, fmt.Errorf("score batch: rollout %d: %w", i, err)
		}
	}
	if n > s.chunk {
		return nil, fmt.Errorf("score batch: %d tokens a rollout, more than the chunk (%d)", n, s.chunk)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkSeq(n); err != nil {
		return nil, err
	}
	if s.batch == nil {
		cfg := s.model.Config
		e, err := newModelExec(s.backend, s.model, func(ctx *mlctx.Context, in []*Node) []*Node {
			l := listOf(in)
			ch := takeChunk(l)
			temp := l.next()
			hidden := decoder(ctx, cfg, ch.tokens, ch.start, chunkOnly{})
			return []*Node{targetLogProbs(tempered(headLogits(ctx, cfg, hidden), temp), ch.targets)}
		})
		if err != nil {
			return nil, fmt.Errorf("score batch: %w", err)
		}
		s.batch = e
	}
	size := minChunk
	for size < n {
		size *= 2
	}
	per := max(1, maxBatchPositions/size) // rollouts a step
	out := make([][]float32, len(rollouts))
	for lo := 0; lo < len(rollouts); lo += per {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		group := rollouts[lo:min(lo+per, len(rollouts))]
		rows := len(group)
		tok, tgt := make([]int32, rows*size), make([]int32, rows*size)
		for i, r := range group {
			copy(tok[i*size:], r)
			copy(tgt[i*size:], r[1:])
		}
		args := []any{tensors.FromFlatDataAndDimensions(tok, rows, size), tensors.FromFlatDataAndDimensions(tgt, rows, size),
			tensors.FromScalar(int32(0)), tempArg(temp)}
		res, err := s.timedExec(s.batch, fmt.Sprintf("batch %d×%d", rows, size), false, args)
		if err != nil {
			return nil, fmt.Errorf("score batch: %w", err)
		}
		lps := tensors.MustCopyFlatData[float32](res[0])
		res[0].FinalizeAll()
		for i := range group {
			lp := make([]float32, n)
			lp[0] = float32(math.NaN())
			copy(lp[1:], lps[i*size:i*size+n-1])
			out[lo+i] = lp
		}
	}
	return out, nil
}
