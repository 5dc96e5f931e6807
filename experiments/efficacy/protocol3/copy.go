package protocol3

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/train"
)

// CopyConfig shapes protocol 3's copy curriculum (attempt 5, issue 40): at one slip of
// a scripted episode, Variants hints that differ only in the call their "Next:" names
// — the call the task needs and others a hint may name there (CopyAlternatives) — each
// followed by the call it names, the only target. Which call follows is decided by the
// hint's argument alone, so copying it is the whole difference between the variants.
type CopyConfig struct {
	// Tasks is the number of train tasks (from 0) that each give one group; Variants
	// the most calls named at one slip (the right one and Variants−1 others); PerBatch
	// the rollouts of each batch drawn from the curriculum (whole groups, the last one
	// cut), the rest of the batch being world demonstrations (Demos). 0 PerBatch: no
	// curriculum (attempts 1–4).
	Tasks    int `json:"tasks"`
	Variants int `json:"variants"`
	PerBatch int `json:"per_batch"`
	// Own is the share of the slips drawn from OwnSlip, the rest efficacy.SilentSlip or
	// toolworld.Mistake as in Demos.
	Own float64 `json:"own"`
	// Sibling adds the sibling copy curriculum (SiblingCopyDemos, attempt 7's next step
	// 2): each task gives a sibling group too, pooled with the hint's groups, so about
	// half of PerBatch is sibling groups.
	Sibling bool `json:"sibling,omitempty"`
	// SiblingShare, with Sibling, pools only this share of the sibling groups (the
	// first, by task: SiblingShareOf) so that the hint's groups keep most of PerBatch
	// (attempt 9c's next step); 0 or 1: all of them.
	SiblingShare float64 `json:"sibling_share,omitempty"`
	// Key adds the key copy curriculum (KeyCopyDemos, attempt 8's next step 1): chain
	// and chainset tasks give groups whose prompts differ only in the key they name,
	// pooled with the hint's groups.
	Key bool `json:"key,omitempty"`
}

// DefaultCopy is attempt 5's curriculum: 4,000 train tasks, 4 variants a slip, half
// of each 32-rollout batch.
func DefaultCopy() CopyConfig { return CopyConfig{Tasks: 4000, Variants: 4, PerBatch: 16, Own: 0.8} }

// CopyCounts count what the curriculum holds.
type CopyCounts struct {
	Groups   int `json:"groups"`
	Rollouts int `json:"rollouts"`
	Failed   int `json:"failed_slips"` // groups whose slip was a failed call
	Skipped  int `json:"skipped"`      // tasks with no slip a hint could name two calls at
}

// CopyDemos builds the copy curriculum of train tasks 0..cfg.Tasks-1 (seeded by
// seed): one group a task, each a slice of 2..cfg.Variants trainer rollouts with the
// same prefix up to the hint turn. Only the named call's tokens (and its stop token)
// are targets.
func CopyDemos(tok tokenizer.Tokenizer, cfg CopyConfig, maxTokens, maxCalls int, seed uint64) ([][]credit.Sequence, CopyCounts, error) {
	return copyCurriculum(tok, cfg, seed, 0x636f7079, func(i int, t toolworld.Task, rng *rand.Rand) ([]copyGroup, error) {
		rs, failed, err := playCopy(tok, t, cfg, maxTokens, maxCalls, rng)
		return []copyGroup{{fmt.Sprintf("copy3-%05d", i), rs, failed}}, err
	})
}

// copyGroup is one group a copy curriculum's play gives: its variant rollouts, the
// prefix of their trainer rollouts' IDs, and whether the scripted episode failed.
type copyGroup struct {
	id     string
	rs     []*rollout.Rollout
	failed bool
}

// copyCurriculum plays train tasks 0..cfg.Tasks-1, each with its own random stream of
// seed (salt apart from other curricula's), and keeps every group of two or more
// variants as trainer rollouts whose only targets are their last call
// (lastCallTargets); a group of fewer is counted as skipped.
func copyCurriculum(tok tokenizer.Tokenizer, cfg CopyConfig, seed, salt uint64, play func(i int, t toolworld.Task, rng *rand.Rand) ([]copyGroup, error)) ([][]credit.Sequence, CopyCounts, error) {
	rule := train.NewRule(efficacy.SFTCredit(), tok)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, cfg.Tasks)
	if err != nil {
		return nil, CopyCounts{}, err
	}
	var out [][]credit.Sequence
	var cnt CopyCounts
	for i, t := range tasks {
		groups, err := play(i, t, rand.New(rand.NewPCG(seed, salt<<20|uint64(i))))
		if err != nil {
			return nil, cnt, err
		}
		for _, g := range groups {
			if len(g.rs) < 2 {
				cnt.Skipped++
				continue
			}
			group := lastCallTargets(g.rs, g.id, rule)
			out = append(out, group)
			cnt.Groups++
			cnt.Rollouts += len(group)
			if g.failed {
				cnt.Failed++
			}
		}
	}
	return out, cnt, nil
}

// lastCallTargets turns a group's rollouts into trainer rollouts (IDs prefix-j) whose
// only targets are the tokens of their last call (and its stop token).
func lastCallTargets(rs []*rollout.Rollout, prefix string, rule train.Rule) []credit.Sequence {
	group := make([]credit.Sequence, len(rs))
	for j, r := range rs {
		r.ID = fmt.Sprintf("%s-%d", prefix, j)
		r.Reward, r.HasReward = 1, true
		xr := train.ToTrainer(r, nil, rule)
		last := -1
		for k, s := range r.Segments {
			if s.Kind == rollout.KindToolCall {
				last = k
			}
		}
		for p := range xr.Trainable {
			if last < 0 || p < int(r.Segments[last].Start) || p >= int(r.Segments[last].End) {
				xr.Trainable[p] = false
			}
		}
		group[j] = xr
	}
	return group
}

// playCopy plays t's solution with one slip before a uniformly drawn call (not the
// answer) and, when efficacy.SlipHint names the call the task needs there, returns the
// variants: the episode replayed to the slip, then a hint naming each of the right
// call and up to cfg.Variants−1 alternatives, then that call. nil when the slip gets no
// such hint or no alternative exists.
func playCopy(tok tokenizer.Tokenizer, t toolworld.Task, cfg CopyConfig, maxTokens, maxCalls int, rng *rand.Rand) ([]*rollout.Rollout, bool, error) {
	s, err := drawCopySlip(tok, t, cfg.Own, maxTokens, maxCalls, rng)
	if err != nil || s == nil {
		return nil, false, err
	}
	exp, slip, lines, k := s.exp, s.slip, s.lines, s.k
	last := k.Turns[len(k.Turns)-1]
	if efficacy.SameCall(k.Expected(), slip) || !strings.Contains(efficacy.SlipHint(k), "Next: ") || k.Expected() != exp {
		return nil, false, nil
	}
	named := append([]string{exp}, CopyAlternatives(exp, slip, t, k.Turns, cfg.Variants-1, rng)...)
	if len(named) < 2 {
		return nil, false, nil
	}
	var out []*rollout.Rollout
	for i, call := range named {
		h := efficacy.SlipHintNaming(k, call)
		if h == "" && i == 0 {
			return nil, false, nil
		} else if h == "" {
			continue
		}
		e, err := replay(tok, t, lines, maxTokens, maxCalls, efficacy.NewTracker(t))
		if err != nil || e == nil {
			return nil, false, err
		}
		gen := append(tok.EncodeText(call), e.StopID())
		if _, err := e.Hint(h); err != nil || len(gen) > e.Budget() {
			if i == 0 {
				return nil, false, nil // no room for the right call's variant
			}
			continue
		}
		if _, _, err := e.Step(gen, nil); err != nil {
			return nil, false, fmt.Errorf("copy demo %s: %w", t.ID, err)
		}
		out = append(out, e.Rollout("copy"))
	}
	return out, last.Failed, nil
}

// copySlip is a scripted episode of a task stopped at one slip: the solution's call at
// index at (exp) replaced by slip, the lines played (the solution before it, then the
// slip) and the Tracker that followed them.
type copySlip struct {
	at        int
	exp, slip string
	lines     []string
	k         *efficacy.Tracker
}

// drawCopySlip draws the slip of the hint's and the sibling's copy curricula: before a
// uniformly drawn call of t's solution (not the answer), a slip of drawSlip's kinds
// (own the share of OwnSlip's), played once so that the Tracker learns the slip's hint
// and the visible words. nil when the draw gives no slip other than the call or the
// episode ends before the slip.
func drawCopySlip(tok tokenizer.Tokenizer, t toolworld.Task, own float64, maxTokens, maxCalls int, rng *rand.Rand) (*copySlip, error) {
	var at []int
	for j, c := range t.Solution {
		if toolworld.ParseCall(c).Name != toolworld.AnswerCommand {
			at = append(at, j)
		}
	}
	if len(at) == 0 {
		return nil, nil
	}
	slipAt := at[rng.IntN(len(at))]
	exp := t.Solution[slipAt]
	slip, _ := drawSlip(exp, t, own, rng)
	if slip == "" || efficacy.SameCall(slip, exp) {
		return nil, nil
	}
	lines := append(slices.Clone(t.Solution[:slipAt]), slip)
	k := efficacy.NewTracker(t)
	env, err := replay(tok, t, lines, maxTokens, maxCalls, k)
	if err != nil || env == nil {
		return nil, err
	}
	return &copySlip{at: slipAt, exp: exp, slip: slip, lines: lines, k: k}, nil
}

// replay plays lines in a fresh environment of t, observed by k; nil when the
// episode ended before the last line.
func replay(tok tokenizer.Tokenizer, t toolworld.Task, lines []string, maxTokens, maxCalls int, k *efficacy.Tracker) (*toolworld.Env, error) {
	env, err := toolworld.New(t, tok, toolworld.Options{MaxTokens: maxTokens, MaxCalls: maxCalls})
	if err != nil {
		return nil, err
	}
	for _, line := range lines {
		if env.Done() {
			return nil, nil
		}
		gen := append(tok.EncodeText(line), env.StopID())
		if len(gen) > env.Budget() {
			return nil, nil
		}
		if _, _, err := env.Step(gen, nil); err != nil {
			return nil, fmt.Errorf("copy demo %s: %w", t.ID, err)
		}
		out, failed := env.Last()
		k.Observe(line, out, failed)
	}
	if env.Done() {
		return nil, nil
	}
	return env, nil
}

// CopyAlternatives returns up to n calls a hint may name after the slip instead of
// exp: exp with one of its words — a directory, file name or key of the task, or a
// number — replaced by another such word (a number by a number) that the visible prefix
// shows, so the call is Nameable and its hint does not leak; never exp or the slip.
// They are near misses of exp, the kind of call the model slips into, so a variant
// and the right call differ at a token that only the hint decides.
func CopyAlternatives(exp, slip string, t toolworld.Task, turns []efficacy.Turn, n int, rng *rand.Rand) []string {
	seen := efficacy.VisibleWords(t, turns)
	vocab := map[string]bool{}
	for p := range t.Files {
		d, f, _ := strings.Cut(p, "/")
		vocab[d], vocab[strings.TrimSuffix(f, ".txt")] = true, true
	}
	for key := range t.KV {
		vocab[key] = true
	}
	isNum := func(w string) bool { return w != "" && strings.Trim(w, "0123456789") == "" }
	var names, nums []string
	for w := range seen {
		switch {
		case w == t.Answer:
		case isNum(w):
			nums = append(nums, w)
		case vocab[w]:
			names = append(names, w)
		}
	}
	sort.Strings(names)
	sort.Strings(nums)
	c := toolworld.ParseCall(exp)
	cands := map[string]bool{}
	for i, arg := range c.Args {
		// Replace each word of the argument in place (by its byte span).
		for _, sp := range wordSpans(arg) {
			w := arg[sp[0]:sp[1]]
			var pool []string
			switch {
			case isNum(w):
				pool = nums
			case vocab[w]:
				pool = names
			}
			for _, r := range pool {
				if r == w {
					continue
				}
				args := slices.Clone(c.Args)
				args[i] = arg[:sp[0]] + r + arg[sp[1]:]
				call := c.Name + " " + strings.Join(args, " ")
				if !efficacy.SameCall(call, exp) && !efficacy.SameCall(call, slip) && efficacy.Nameable(call, t, turns) {
					cands[call] = true
				}
			}
		}
	}
	all := make([]string, 0, len(cands))
	for call := range cands {
		all = append(all, call)
	}
	sort.Strings(all)
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:min(n, len(all))]
}

// wordSpans returns the byte spans of the words (as words splits them) of s.
func wordSpans(s string) [][2]int {
	var out [][2]int
	start := -1
	for i := 0; i <= len(s); i++ {
		in := i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z' || s[i] == '_')
		switch {
		case in && start < 0:
			start = i
		case !in && start >= 0:
			out = append(out, [2]int{start, i})
			start = -1
		}
	}
	return out
}

// copyBatches draws batches that mix world demonstrations with whole copy groups.
type copyBatches struct {
	world  *efficacy.DemoBatches
	groups [][]credit.Sequence
	order  []int
	next   int
	rng    *rand.Rand
}

func newCopyBatches(world []credit.Sequence, groups [][]credit.Sequence, rng *rand.Rand) *copyBatches {
	return &copyBatches{world: efficacy.NewDemoBatches(world, rng), groups: groups, order: rng.Perm(len(groups)), rng: rng}
}

// batch returns n rollouts: n−perBatch world demonstrations, then perBatch rollouts of
// copy groups taken whole in a shuffled order (the last one cut to fit).
func (b *copyBatches) batch(n, perBatch int) []credit.Sequence {
	if len(b.groups) == 0 {
		perBatch = 0
	}
	out := b.world.Batch(n - perBatch)
	for k := 0; k < perBatch; {
		if b.next == len(b.order) {
			b.order, b.next = b.rng.Perm(len(b.groups)), 0
		}
		g := b.groups[b.order[b.next]]
		b.next++
		g = g[:min(len(g), perBatch-k)]
		out = append(out, g...)
		k += len(g)
	}
	return out
}
