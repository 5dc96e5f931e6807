package collect

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// EpisodeOptions configure a set of episodes.
type EpisodeOptions struct {
	// Group is G, the episodes per task (default 1).
	Group int
	// Batch bounds the episodes whose turns are sampled in one Generate call
	// (default 16).
	Batch int
	// MaxTurnTokens caps one policy turn (default 48); a turn also stops at the
	// episode's room (toolworld.Env.Budget).
	MaxTurnTokens int
	// Sampling: temperature (0: greedy), top-k, top-p.
	Temperature float64
	TopK        int
	TopP        float64
	// Seed makes the episodes reproducible: the same seed, tasks, policy and backend
	// give the same rollouts.
	Seed uint64
	// Env configures each episode (rollout length, calls).
	Env toolworld.Options
	// AfterStep, if set, is called after each policy turn of episode i (Episodes'
	// order) has been stepped, before its next turn is sampled: where a live teacher
	// inserts a hint turn (toolworld.Env.Hint) for the turn that follows.
	AfterStep func(i int, env *toolworld.Env) error
}

func (o *EpisodeOptions) defaults() {
	if o.Group <= 0 {
		o.Group = 1
	}
	if o.Batch <= 0 {
		o.Batch = 16
	}
	if o.MaxTurnTokens <= 0 {
		o.MaxTurnTokens = 48
	}
}

// Episodes plays opts.Group episodes of each task with the sampler's policy, turn by
// turn: every unfinished episode's context is a prompt, its sampled turn (with the
// log-probs of the distribution sampled from) goes to the episode, which runs the
// call and appends the tool's answer. Each episode records the sampling temperature
// (toolworld.Env.SetTemperature; 0 when greedy), which its rollout carries. Episode i·Group+g is task i's g-th. It stops
// early when ctx ends and returns the episodes played so far with ctx's error.
func Episodes(ctx context.Context, s *xla.Sampler, tok tokenizer.Tokenizer, tasks []toolworld.Task, opts EpisodeOptions) ([]*toolworld.Env, error) {
	opts.defaults()
	envs := make([]*toolworld.Env, 0, len(tasks)*opts.Group)
	for _, t := range tasks {
		for range opts.Group {
			e, err := toolworld.New(t, tok, opts.Env)
			if err != nil {
				return nil, err
			}
			temp := opts.Temperature
			if opts.TopK == 1 {
				temp = 0 // greedy at any temperature
			}
			e.SetTemperature(temp) // its rollout's temperature column
			envs = append(envs, e)
		}
	}
	for round := 0; ; round++ {
		var live []int
		for i, e := range envs {
			if !e.Done() {
				live = append(live, i)
			}
		}
		if len(live) == 0 {
			return envs, nil
		}
		for b := 0; b < len(live); b += opts.Batch {
			if err := ctx.Err(); err != nil {
				return envs, err
			}
			rows := live[b:min(b+opts.Batch, len(live))]
			if err := turn(ctx, s, envs, rows, opts, roundSeed(opts.Seed, round, b)); err != nil {
				return envs, err
			}
		}
	}
}

// turn samples one policy turn for each episode of rows and steps them.
func turn(ctx context.Context, s *xla.Sampler, envs []*toolworld.Env, rows []int, opts EpisodeOptions, seed uint64) error {
	prompts := make([][]int32, len(rows))
	maxNew := 0
	for k, i := range rows {
		prompts[k] = envs[i].Tokens()
		maxNew = max(maxNew, min(opts.MaxTurnTokens, envs[i].Budget()))
	}
	if maxNew == 0 {
		maxNew = 1
	}
	stop := envs[rows[0]].StopID()
	out, err := s.Generate(ctx, prompts, xla.SampleOptions{MaxNew: maxNew, Temperature: opts.Temperature,
		TopK: opts.TopK, TopP: opts.TopP, Stop: []int32{stop}, Seed: seed})
	if err != nil {
		return fmt.Errorf("sample turn: %w", err)
	}
	for k, i := range rows {
		e := envs[i]
		n := min(len(out[k].Tokens), opts.MaxTurnTokens, e.Budget())
		if _, _, err := e.Step(out[k].Tokens[:n], out[k].LogProbs[:n]); err != nil {
			return err
		}
		if opts.AfterStep != nil {
			if err := opts.AfterStep(i, e); err != nil {
				return err
			}
		}
	}
	return nil
}

// roundSeed derives the seed of one Generate call from the run's seed, the round and
// the batch's first row, so batches of one round draw from distinct streams.
func roundSeed(seed uint64, round, first int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", seed, round, first)
	return h.Sum64()
}

// Stats sum up a set of finished episodes.
type Stats struct {
	Episodes  int     `json:"episodes"`
	Success   float64 `json:"success"`     // share of episodes with reward 1
	Reward    float64 `json:"mean_reward"` // mean reward
	ToolError float64 `json:"tool_error"`  // failed calls / calls
	Calls     float64 `json:"calls"`       // mean calls per episode
	Tokens    float64 `json:"tokens"`      // mean tokens per episode
	Truncated float64 `json:"truncated"`   // share that ran out of room or calls
}

// Summarize computes the Stats of envs (finished or not: an unfinished one counts as
// a failure).
func Summarize(envs []*toolworld.Env) Stats {
	s := Stats{Episodes: len(envs)}
	if len(envs) == 0 {
		return s
	}
	var calls, failed int
	for _, e := range envs {
		c, f := e.Calls()
		calls, failed = calls+c, failed+f
		if e.Done() && e.Reward() == 1 {
			s.Success++
		}
		s.Reward += float64(e.Reward())
		s.Tokens += float64(len(e.Tokens()))
		if e.Truncated() {
			s.Truncated++
		}
	}
	n := float64(len(envs))
	s.Success, s.Reward, s.Tokens, s.Truncated = s.Success/n, s.Reward/n, s.Tokens/n, s.Truncated/n
	s.Calls = float64(calls) / n
	if calls > 0 {
		s.ToolError = float64(failed) / float64(calls)
	}
	return s
}

// Metrics returns s as eval metrics.
func (s Stats) Metrics() map[string]float64 {
	return map[string]float64{"episodes": float64(s.Episodes), "success": s.Success, "mean_reward": s.Reward,
		"tool_error_rate": s.ToolError, "calls_per_task": s.Calls, "tokens_per_task": s.Tokens, "truncated": s.Truncated}
}
