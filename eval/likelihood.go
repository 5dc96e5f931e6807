package eval

import (
	"context"
	"fmt"
	"math"

	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// runLikelihood scores every valid rollout of file under the policy and returns the
// mean log-prob per trainable token (nats; docs/design.md's trainable-token rule, so the
// reference rollouts must carry sampler log-probs on their policy tokens). Rows with
// problems are counted as skipped. When ctx ends first the metrics cover the rollouts
// scored so far and complete is false.
func runLikelihood(ctx context.Context, file string, sc *xla.Scorer, opts rollout.ReadOptions) (m map[string]float64, complete bool, err error) {
	r, err := rollout.OpenReader(file, opts)
	if err != nil {
		return nil, false, fmt.Errorf("likelihood %s: %w", file, err)
	}
	defer r.Close()
	var sum float64
	var tokens, rollouts, skipped int
	complete = true
	for r.Next() {
		if ctx.Err() != nil {
			complete = false
			break
		}
		if r.Problems() != nil {
			skipped++
			continue
		}
		ro := r.Rollout()
		lp, cache, err := sc.Score(ctx, ro.Tokens)
		if err != nil {
			if ctx.Err() != nil {
				complete = false
				break
			}
			return nil, false, fmt.Errorf("likelihood %s: row %d (rollout_id %q): %w", file, r.Row(), ro.ID, err)
		}
		cache.Close()
		for t := 1; t < len(ro.Tokens); t++ {
			if ro.Trainable(t) && !math.IsNaN(float64(lp[t])) {
				sum += float64(lp[t])
				tokens++
			}
		}
		rollouts++
	}
	if err := r.Err(); err != nil {
		return nil, false, fmt.Errorf("likelihood %s: %w", file, err)
	}
	if tokens == 0 && complete {
		return nil, false, fmt.Errorf("likelihood %s: no trainable token in %d valid rollouts (%d skipped): reference rollouts need non-null logprobs on their policy tokens", file, rollouts, skipped)
	}
	m = map[string]float64{"rollouts": float64(rollouts), "tokens": float64(tokens), "skipped": float64(skipped)}
	if tokens > 0 {
		m["mean_logprob"] = sum / float64(tokens)
		m["perplexity"] = math.Exp(-sum / float64(tokens))
	}
	return m, complete, nil
}
