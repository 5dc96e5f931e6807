package protocol3

import (
	"fmt"
	"math/rand/v2"
	"regexp"
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

// DemoConfig shapes protocol 3's demonstrations (issue 27 item 2): a scripted agent
// on the solution's path slips with probability Slip before a call (half of the time
// silently, where the call can be spoilt so, else with toolworld.Mistake's failing
// call); after a slip, with probability HintRate a hint turn in efficacy.SlipHint's wording
// follows and the agent makes the corrected call, with probability SiblingRate a
// sibling context (efficacy.SiblingText of the solution's calls) follows and the agent makes
// the corrected call, and otherwise the agent first makes the exploring call
// (Explore), then the corrected call. Slipped calls are context, never targets.
type DemoConfig struct {
	Slip float64 `json:"slip"`
	// Own is the share of slips drawn from OwnSlip (the slip types the warm start
	// itself makes: a near-miss name, a wrong key, a wrong number) instead of the
	// silent-or-Mistake mix above.
	Own         float64 `json:"own,omitempty"`
	HintRate    float64 `json:"hint_rate"`
	SiblingRate float64 `json:"sibling_rate"`
}

// DefaultDemo is the warm start's mix of attempts 2 and 3 (attempt 1 ran with Own 0 and
// HintRate 0.4; attempt 3 changed efficacy.SlipHint's wording, not the mix).
func DefaultDemo() DemoConfig {
	return DemoConfig{Slip: 0.3, Own: 0.8, HintRate: 0.5, SiblingRate: 0.2}
}

// DemoCounts count what a set of demonstrations holds.
type DemoCounts struct {
	Demos        int `json:"demos"`
	Slips        int `json:"slips"`
	SilentSlips  int `json:"silent_slips"`
	HintTurns    int `json:"hint_turns"`
	SiblingTurns int `json:"sibling_turns"`
	Explores     int `json:"explores"`
	Dropped      int `json:"dropped"` // episodes that did not succeed (cut short): not demonstrations
}

// Demos plays one demonstration of each of train tasks 0..n-1 (seeded by seed) and
// returns the successful ones as trainer rollouts (SFT: advantage 1 on the policy
// tokens that are not slips).
func Demos(tok tokenizer.Tokenizer, n int, cfg DemoConfig, maxTokens, maxCalls int, seed uint64) ([]credit.Sequence, DemoCounts, error) {
	rule := train.NewRule(efficacy.SFTCredit(), tok) // policy turns past their role header are the targets (no sampler log-probs)
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, n)
	if err != nil {
		return nil, DemoCounts{}, err
	}
	var out []credit.Sequence
	var cnt DemoCounts
	for i, t := range tasks {
		r, slips, err := playDemo(tok, t, cfg, maxTokens, maxCalls, rand.New(rand.NewPCG(seed, uint64(i))), &cnt)
		if err != nil {
			return nil, cnt, err
		}
		if r == nil {
			cnt.Dropped++
			continue
		}
		r.ID = fmt.Sprintf("demo3-%05d", i)
		xr := train.ToTrainer(r, nil, rule)
		call := 0
		for _, s := range r.Segments {
			if s.Kind != rollout.KindToolCall {
				continue
			}
			if slips[call] {
				for p := s.Start; p < s.End; p++ {
					xr.Trainable[p] = false
				}
			}
			call++
		}
		out = append(out, xr)
		cnt.Demos++
	}
	return out, cnt, nil
}

// drawSlip draws the call an agent makes instead of exp at a slip: OwnSlip with
// probability own, else efficacy.SilentSlip half of the time, and toolworld.Mistake's failing
// call where those give none other than exp. silent reports a slip that is not
// Mistake's. Demos and CopyDemos draw their slips alike.
func drawSlip(exp string, t toolworld.Task, own float64, rng *rand.Rand) (slip string, silent bool) {
	if rng.Float64() < own {
		slip = OwnSlip(exp, t, rng.IntN)
	} else if rng.IntN(2) == 0 {
		slip = efficacy.SilentSlip(exp, t, rng.IntN)
	}
	if slip == "" || efficacy.SameCall(slip, exp) {
		return toolworld.Mistake(exp, rng), false
	}
	return slip, true
}

// playDemo plays one demonstration; nil when it did not end in success. slips marks
// the tool calls (in order) that were slips.
func playDemo(tok tokenizer.Tokenizer, t toolworld.Task, cfg DemoConfig, maxTokens, maxCalls int, rng *rand.Rand, cnt *DemoCounts) (*rollout.Rollout, map[int]bool, error) {
	env, err := toolworld.New(t, tok, toolworld.Options{MaxTokens: maxTokens, MaxCalls: maxCalls})
	if err != nil {
		return nil, nil, err
	}
	k := efficacy.NewTracker(t)
	slips := map[int]bool{}
	calls := 0
	pending, explored := false, false
	for turn := 0; turn < 24 && !env.Done(); turn++ {
		exp := k.Expected()
		var line string
		switch {
		case pending:
			pending = false
			switch u := rng.Float64(); {
			case u < cfg.HintRate:
				if h := efficacy.SlipHint(k); h != "" {
					if _, err := env.Hint(h); err == nil {
						cnt.HintTurns++
						line = exp
					}
				}
			case u < cfg.HintRate+cfg.SiblingRate:
				if _, err := env.UserTurn(efficacy.SiblingText(t.Solution)); err == nil {
					cnt.SiblingTurns++
					line = exp
				}
			}
			if line == "" {
				line, explored = efficacy.Explore(exp), true
				cnt.Explores++
			}
		case explored:
			line, explored = exp, false
		case toolworld.ParseCall(exp).Name != toolworld.AnswerCommand && rng.Float64() < cfg.Slip:
			var silent bool
			if line, silent = drawSlip(exp, t, cfg.Own, rng); silent {
				cnt.SilentSlips++ // or an own slip
			}
			if line == "" {
				line = exp
			}
		default:
			line = exp
		}
		gen := append(tok.EncodeText(line), env.StopID())
		gen = gen[:min(len(gen), env.Budget())]
		if _, _, err := env.Step(gen, nil); err != nil {
			return nil, nil, fmt.Errorf("demo %s: %w", t.ID, err)
		}
		if toolworld.ParseCall(line).Name == toolworld.AnswerCommand {
			continue
		}
		out, failed := env.Last()
		if k.Observe(line, out, failed) {
			slips[calls] = true
			pending = true
			cnt.Slips++
		}
		calls++
	}
	if env.Reward() != 1 {
		return nil, nil, nil
	}
	r := env.Rollout("demo")
	r.Reward, r.HasReward = 1, true
	return r, slips, nil
}

// OwnSlip returns a slip of the kind the protocol-1-trained model makes itself (read
// off its live-hint episodes): a near-miss name — a path whose file (or a directory)
// is another word the task shows, which may or may not exist — a key that is another
// word of the task, a number with a digit changed or added, a `set` of the wrong key
// or value. "" for a call it cannot spoil.
func OwnSlip(call string, t toolworld.Task, pick func(n int) int) string {
	c := toolworld.ParseCall(call)
	var vocab []string // the words the task's tree and store hold, sorted
	for p := range t.Files {
		d, f, _ := strings.Cut(p, "/")
		vocab = append(vocab, d, strings.TrimSuffix(f, ".txt"))
	}
	for k := range t.KV {
		vocab = append(vocab, k)
	}
	sort.Strings(vocab)
	vocab = slices.Compact(vocab)
	word := func(not string) string {
		for range 8 {
			if w := vocab[pick(len(vocab))]; w != not {
				return w
			}
		}
		return not + "s"
	}
	number := func(s string) string {
		nums := reNumber.FindAllStringIndex(s, -1)
		if len(nums) == 0 {
			return s
		}
		at := nums[pick(len(nums))]
		n := s[at[0]:at[1]]
		if pick(2) == 0 {
			n += fmt.Sprint(pick(10)) // a digit too many
		} else {
			i := pick(len(n))
			n = n[:i] + fmt.Sprint((int(n[i]-'0')+1+pick(8))%10) + n[i+1:]
		}
		return s[:at[0]] + n + s[at[1]:]
	}
	switch {
	case (c.Name == "cat") && len(c.Args) == 1:
		d, f, ok := strings.Cut(c.Args[0], "/")
		if !ok {
			return ""
		}
		return "cat " + d + "/" + word(strings.TrimSuffix(f, ".txt")) + ".txt"
	case c.Name == "ls" && len(c.Args) == 1:
		return "ls " + word(c.Args[0])
	case c.Name == "grep" && len(c.Args) == 2:
		return "grep " + word(c.Args[0]) + " " + c.Args[1]
	case c.Name == "get" && len(c.Args) == 1:
		return "get " + word(c.Args[0])
	case c.Name == "set" && len(c.Args) == 2:
		if pick(2) == 0 {
			return "set " + word(c.Args[0]) + " " + c.Args[1]
		}
		return "set " + c.Args[0] + " " + number(c.Args[1])
	case c.Name == "calc" && len(c.Args) == 1:
		return "calc " + number(c.Args[0])
	}
	return ""
}

// reNumber finds the numbers of a call (as efficacy's slips do).
var reNumber = regexp.MustCompile(`[0-9]+`)
