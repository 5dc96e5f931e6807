package eval

import (
	"context"
	"errors"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// toolworldChunk is the tasks played between two looks at the budget.
const toolworldChunk = 32

// RunToolworld plays one episode of each of the suite's tasks (default: the whole
// held-out split) with the policy at the suite's temperature and returns success,
// mean reward, tool-error rate, calls, tokens per task and the truncated share. When
// ctx ends (the budget) it stops between chunks of tasks: the metrics cover the
// episodes played and complete is false.
func RunToolworld(ctx context.Context, s SuiteConfig, p Policy) (map[string]float64, bool, error) {
	if p.Sampler == nil || p.Tokenizer == nil {
		return nil, false, errors.New("toolworld: no sampler for the policy")
	}
	split := s.Split
	if split == "" {
		split = toolworld.SplitHeldout
	}
	n := s.Tasks
	if n == 0 {
		n = toolworld.SplitSizes[split]
	}
	tasks, err := toolworld.Tasks(split, n)
	if err != nil {
		return nil, false, err
	}
	opts := collect.EpisodeOptions{Group: 1, MaxTurnTokens: s.MaxTurnTokens, Temperature: s.Temperature, Seed: s.Seed,
		Env: toolworld.Options{MaxTokens: s.MaxTokens}}
	var envs []*toolworld.Env
	complete := true
	for i := 0; i < len(tasks); i += toolworldChunk {
		if ctx.Err() != nil {
			complete = false
			break
		}
		part, err := collect.Episodes(ctx, p.Sampler, p.Tokenizer, tasks[i:min(i+toolworldChunk, len(tasks))], opts)
		if err != nil {
			if ctx.Err() != nil {
				complete = false
				break
			}
			return nil, false, err
		}
		envs = append(envs, part...)
	}
	if len(envs) == 0 {
		return map[string]float64{"episodes": 0}, false, nil
	}
	return collect.Summarize(envs).Metrics(), complete, nil
}
