package credit

import "sort"

// Baselines are running mean rewards, per task and over all tasks, for rollouts that
// are alone in their task group within a step. They are part of the checkpoint (JSON).
type Baselines struct {
	Task   map[string]float64 `json:"task"`
	Global float64            `json:"global"`
	// Seen says whether Global holds a mean yet.
	Seen bool `json:"seen"`
}

// NewBaselines returns empty baselines.
func NewBaselines() *Baselines { return &Baselines{Task: map[string]float64{}} }

// outcomeAdvantages returns A_out per rollout: R minus the mean reward of the other
// rollouts of the same task in this step (leave-one-out); a rollout alone in its group
// uses the running mean of its task, else the global one, else its own reward (0); a
// null reward gives 0.
func outcomeAdvantages(rs []Sequence, b *Baselines) []float64 {
	type group struct {
		sum float64
		n   int
	}
	groups := map[string]*group{}
	for i := range rs {
		if r := &rs[i]; r.HasReward && r.TaskID != "" {
			g := groups[r.TaskID]
			if g == nil {
				g = &group{}
				groups[r.TaskID] = g
			}
			g.sum += r.Reward
			g.n++
		}
	}
	out := make([]float64, len(rs))
	for i := range rs {
		r := &rs[i]
		if !r.HasReward {
			continue
		}
		if g := groups[r.TaskID]; r.TaskID != "" && g.n > 1 {
			out[i] = r.Reward - (g.sum-r.Reward)/float64(g.n-1)
			continue
		}
		switch mean, ok := b.Task[r.TaskID]; {
		case ok && r.TaskID != "":
			out[i] = r.Reward - mean
		case b.Seen:
			out[i] = r.Reward - b.Global
		}
	}
	return out
}

// update moves the running means toward this step's rewards, in rollout order: a task
// seen for the first time starts at its reward.
func (b *Baselines) update(rate float64, rs []Sequence) {
	if b.Task == nil {
		b.Task = map[string]float64{}
	}
	for i := range rs {
		r := &rs[i]
		if !r.HasReward {
			continue
		}
		if r.TaskID != "" {
			if m, ok := b.Task[r.TaskID]; ok {
				b.Task[r.TaskID] = m + rate*(r.Reward-m)
			} else {
				b.Task[r.TaskID] = r.Reward
			}
		}
		if b.Seen {
			b.Global += rate * (r.Reward - b.Global)
		} else {
			b.Global, b.Seen = r.Reward, true
		}
	}
}

// Tasks returns the task ids with a running mean, sorted (for stable output).
func (b *Baselines) Tasks() []string {
	ids := make([]string, 0, len(b.Task))
	for id := range b.Task {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
