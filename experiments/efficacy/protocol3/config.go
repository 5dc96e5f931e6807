package protocol3

import (
	"slices"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// Hints is the hint stage of protocol 3's hint and placebo arms: the world
// rules (efficacy.SlipHint) at the retry turn.
var Hints = efficacy.HintSetup{Rules: efficacy.RulesWorld3, Place: efficacy.PlaceRetry, Base: credit.BaseStudent}

// Config returns protocol 3's pre-registered arms (issue 27 item 4): every arm
// of efficacy.Arms3 with seeds 1–3, 48 steps of 8 train tasks × G = 8 rollouts sampled at
// temperature 1 (3,072 rollouts a run), greedy held-out evals of all 250 tasks every
// 12 steps, in World, distillation mode full (the byte tokenizer's 265 ids;
// topk for a larger vocabulary). LR is 0: the outcome-only pilot (G4) fixes it.
func Config() efficacy.Config {
	return efficacy.Config{Protocol: 3, Arms: slices.Clone(efficacy.Arms3), Seeds: []int64{1, 2, 3}, Steps: 48, TasksPerStep: 8, Group: 8,
		Temperature: 1, EvalEvery: 12, EvalTasks: toolworld.SplitSizes[toolworld.SplitHeldout], EvalSplit: toolworld.SplitHeldout,
		World: World(), Hints: Hints, Distill: credit.DistillFull}
}

// DistillFor returns the distillation mode of protocol 3 for a vocabulary of vocab
// ids: full where the teacher's whole distribution may be kept (xla.MaxFullVocab),
// else topk.
func DistillFor(vocab int) credit.DistillMode {
	if vocab <= xla.MaxFullVocab {
		return credit.DistillFull
	}
	return credit.DistillTopK
}

// World sizes protocol 3's task world: 320 tokens a rollout, 40 a turn, 8
// calls, where one slip no longer ends a chained task (issue 27: the noisy scripted
// agent with p = 0.25 succeeds 86.4% at 256 tokens / 6 calls, 90.8% at 320 / 8).
func World() efficacy.World {
	return efficacy.World{MaxTokens: 320, MaxTurnTokens: 40, MaxCalls: 8}
}
