package efficacy

import (
	"fmt"
	"math/rand/v2"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// Demo3Config shapes protocol 3's demonstrations (issue 27 item 2): a scripted agent
// on the solution's path slips with probability Slip before a call (half of the time
// silently, where the call can be spoilt so, else with toolworld.Mistake's failing
// call); after a slip, with probability HintRate a hint turn in SlipHint's wording
// follows and the agent makes the corrected call, with probability SiblingRate a
// sibling context (SiblingText of the solution's calls) follows and the agent makes
// the corrected call, and otherwise the agent first makes the exploring call
// (Explore), then the corrected call. Slipped calls are context, never targets.
type Demo3Config struct {
	Slip        float64 `json:"slip"`
	HintRate    float64 `json:"hint_rate"`
	SiblingRate float64 `json:"sibling_rate"`
}

// DefaultDemo3 is the committed warm start's mix.
func DefaultDemo3() Demo3Config { return Demo3Config{Slip: 0.3, HintRate: 0.4, SiblingRate: 0.2} }

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

// Demos3 plays one demonstration of each of train tasks 0..n-1 (seeded by seed) and
// returns the successful ones as trainer rollouts (SFT: advantage 1 on the policy
// tokens that are not slips).
func Demos3(tok data.Tokenizer, n int, cfg Demo3Config, maxTokens, maxCalls int, seed uint64) ([]xla.Rollout, DemoCounts, error) {
	header := len(tok.Encode(toolworld.BytesFormat.Assistant))
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, n)
	if err != nil {
		return nil, DemoCounts{}, err
	}
	var out []xla.Rollout
	var cnt DemoCounts
	for i, t := range tasks {
		r, slips, err := playDemo3(tok, t, cfg, maxTokens, maxCalls, rand.New(rand.NewPCG(seed, uint64(i))), &cnt)
		if err != nil {
			return nil, cnt, err
		}
		if r == nil {
			cnt.Dropped++
			continue
		}
		r.ID = fmt.Sprintf("demo3-%05d", i)
		xr := toTrainer(r, nil, header)
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

// playDemo3 plays one demonstration; nil when it did not end in success. slips marks
// the tool calls (in order) that were slips.
func playDemo3(tok data.Tokenizer, t toolworld.Task, cfg Demo3Config, maxTokens, maxCalls int, rng *rand.Rand, cnt *DemoCounts) (*rollout.Rollout, map[int]bool, error) {
	env, err := toolworld.New(t, tok, toolworld.Options{MaxTokens: maxTokens, MaxCalls: maxCalls})
	if err != nil {
		return nil, nil, err
	}
	k := NewTracker(t)
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
				if h := SlipHint(k); h != "" {
					if _, err := env.Hint(h); err == nil {
						cnt.HintTurns++
						line = exp
					}
				}
			case u < cfg.HintRate+cfg.SiblingRate:
				if _, err := env.UserTurn(SiblingText(t.Solution)); err == nil {
					cnt.SiblingTurns++
					line = exp
				}
			}
			if line == "" {
				line, explored = Explore(exp), true
				cnt.Explores++
			}
		case explored:
			line, explored = exp, false
		case toolworld.ParseCall(exp).Name != toolworld.AnswerCommand && rng.Float64() < cfg.Slip:
			if rng.IntN(2) == 0 {
				line = SilentSlip(exp, t, rng.IntN)
			}
			if line == "" {
				line = toolworld.Mistake(exp, rng)
			} else {
				cnt.SilentSlips++
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
