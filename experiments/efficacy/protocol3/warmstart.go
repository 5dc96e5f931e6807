package protocol3

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// WarmStartConfig configures protocol 3's warm start: supervised fine-tuning on
// Demos, evaluated on the validation split every EvalEvery steps, stopped at the
// first checkpoint whose validation numbers pass the gates' thresholds (GateProxy),
// when validation success passes the G3 ceiling, when no eval has been better
// (GateBetter) than the kept one for Patience evals, at Steps, or when the wall
// budget is spent (then evaluated at that step). The model written is the first that
// passed, else the best by GateBetter.
type WarmStartConfig struct {
	Init          string     `json:"init"`
	Out           string     `json:"out"`
	Demos         int        `json:"demos"`
	Demo          DemoConfig `json:"demo"`
	DemoMaxTokens int        `json:"demo_max_tokens"`
	DemoMaxCalls  int        `json:"demo_max_calls"`
	Batch         int        `json:"batch"`
	Steps         int        `json:"steps"`
	LR            float64    `json:"lr"`
	EvalEvery     int        `json:"eval_every"`
	ValTasks      int        `json:"val_tasks"`
	Patience      int        `json:"patience"`
	// WallBudget stops training at the first eval after this much wall time (0: none):
	// the warm start must fit a shared 2-core machine's hour.
	WallBudget time.Duration `json:"wall_budget_ns"`
	Seed       uint64        `json:"seed"`
	// GrowLayers, when set, is the depth the init model was grown to before training
	// (GrowLayers, by the command; attempt 4: 2 → 4).
	GrowLayers int `json:"grow_layers,omitempty"`
	// Copy is the copy curriculum mixed into each batch (attempt 5; Copy.PerBatch 0:
	// none). MarginTasks, when > 0, adds ProbeSplit's deciding-token margin on that
	// many validation tasks to every eval. KeepByMargin (attempt 5) keeps the best eval
	// by MarginBetter instead of GateBetter and stops only at GateProxy, Steps or
	// the wall budget (no ceiling, no patience), so the copy has the steps to form.
	Copy         CopyConfig `json:"copy,omitzero"`
	MarginTasks  int        `json:"margin_tasks,omitempty"`
	KeepByMargin bool       `json:"keep_by_margin,omitempty"`
	// KeepByHint (attempt 10) keeps the best eval by GateBetter in Band (inside the
	// band first, then the higher next-call rate after a hinted slip, G1's binding
	// half) and, like KeepByMargin, stops only at GateProxy, Steps or the wall budget.
	KeepByHint bool `json:"keep_by_hint,omitempty"`
	// WorldFamilies, when set, keeps only the world demonstrations of these task
	// families (KeepFamilies; attempt 7: chain, chainset, store); the copy curriculum
	// keeps every family.
	WorldFamilies []string `json:"world_families,omitempty"`
	// Band is the validation success band that keeping (GateBetter, MarginBetter) and
	// stopping (GateProxy) aim at; the zero Band is G3's (G3Band). Attempt 10 aims at
	// the band's middle on the 200 validation tasks, weighted to held-out's family mix.
	Band      Band           `json:"band,omitzero"`
	World     efficacy.World `json:"world"`      // greedy success (G3)
	LiveWorld efficacy.World `json:"live_world"` // live contexts (G1): room for the inserted turns
}

// DefaultWarmStart returns the committed protocol-3 warm start's settings.
func DefaultWarmStart() WarmStartConfig {
	return WarmStartConfig{Demos: 4000, Demo: DefaultDemo(), DemoMaxTokens: 512, DemoMaxCalls: 12, Batch: 32,
		Steps: 1200, LR: 3e-3, EvalEvery: 150, ValTasks: 60, Patience: 3, WallBudget: 65 * time.Minute, Seed: 3, World: World(), LiveWorld: LiveWorld()}
}

// LiveWorld is World with room for the turns a live context inserts (a hint
// is 60–130 byte tokens, a sibling 60–110): 448 tokens, 8 calls. Every condition of a
// live eval, none included, runs at these caps.
func LiveWorld() efficacy.World {
	return efficacy.World{MaxTokens: 448, MaxTurnTokens: 40, MaxCalls: 8}
}

// Band is a range of greedy success rates (fractions), both ends inside. With Mix it
// reads a validation eval's MixSuccess (success weighted to the held-out split's
// family mix) in place of its Success.
type Band struct {
	Lo  float64 `json:"lo"`
	Hi  float64 `json:"hi"`
	Mix bool    `json:"mix,omitempty"`
}

// G3Band is G3's greedy band: held-out success 30–45%.
var G3Band = Band{Lo: 0.30, Hi: 0.45}

// Holds reports whether v's success (MixSuccess with Mix) lies in the band.
func (b Band) Holds(v ValPoint) bool {
	s := v.Success
	if b.Mix {
		s = v.MixSuccess
	}
	return s >= b.Lo && s <= b.Hi
}

// Validate checks that the band is a range inside [0, 1].
func (b Band) Validate() error {
	if !(b.Lo >= 0 && b.Lo < b.Hi && b.Hi <= 1) {
		return fmt.Errorf("band %v–%v: want 0 ≤ lo < hi ≤ 1", b.Lo, b.Hi)
	}
	return nil
}

// band is cfg.Band, or G3Band when unset.
func (cfg WarmStartConfig) band() Band {
	if cfg.Band.Lo == 0 && cfg.Band.Hi == 0 {
		return G3Band
	}
	return cfg.Band
}

// ValPoint is one validation eval of the warm start.
type ValPoint struct {
	Step    int     `json:"step"`
	Loss    float64 `json:"loss"`
	Success float64 `json:"success"` // greedy, World
	// MixSuccess is Success weighted to the held-out split's family mix (MixSuccess):
	// the validation split's first tasks hold other shares of the six families
	// (the first 60: 2 chain and 2 chainset; held-out's 250: 27 and 26).
	MixSuccess  float64            `json:"success_heldout_mix"`
	ByFamily    map[string]float64 `json:"success_by_family,omitempty"` // greedy
	NoneSuccess float64            `json:"none_success"`                // live none, LiveWorld
	HintSuccess float64            `json:"hint_success"`                // live hint, LiveWorld
	NoneRight   float64            `json:"none_next_right"`
	HintRight   float64            `json:"hint_next_right"`
	// SiblingSuccess and SiblingRight are live sibling's (LiveWorld; attempt 10 on):
	// G1's sibling half, which GateProxy does not read.
	SiblingSuccess float64 `json:"sibling_success"`
	SiblingRight   float64 `json:"sibling_next_right"`
	// The counts behind the next-call rates: slips followed by a next turn (After)
	// and how many of those next calls were right, per live context.
	NoneAfter    int     `json:"none_after"`
	NoneNext     int     `json:"none_next_right_count"`
	HintAfter    int     `json:"hint_after"`
	HintNext     int     `json:"hint_next_right_count"`
	SiblingAfter int     `json:"sibling_after"`
	SiblingNext  int     `json:"sibling_next_right_count"`
	SiblingSlips int     `json:"sibling_slips"` // slips of the live sibling episodes
	Passes       bool    `json:"passes"`
	CPUSeconds   float64 `json:"cpu_seconds"`
	// Margin is ProbeSplit's deciding-token margin gain (hint − empty hint, nats) on
	// the validation split, with its slips and the slips at which the right call's
	// token is the likelier after the hint (WarmStartConfig.MarginTasks > 0).
	Margin      float64 `json:"margin_gain,omitempty"`
	MarginSlips int     `json:"margin_slips,omitempty"`
	MarginAbove int     `json:"margin_right_above_hint,omitempty"`
}

// MarginBetter is attempt 5's keeping rule: an eval inside G3's greedy band (30–45%)
// before one outside it; among those, the larger deciding-token margin gain; a tie
// keeps the earlier checkpoint (a is not better).
func MarginBetter(a, b ValPoint) bool { return G3Band.MarginBetter(a, b) }

// MarginBetter is attempt 5's keeping rule with band in place of G3's.
func (band Band) MarginBetter(a, b ValPoint) bool {
	if band.Holds(a) != band.Holds(b) {
		return band.Holds(a)
	}
	return a.Margin > b.Margin
}

// GateBetter reports whether validation eval a is closer to passing the gates than b
// (attempt 3's rule for the checkpoint kept when none passes GateProxy): a checkpoint
// inside G3's greedy band (30–45%) before one outside it; then the higher next-call
// rate after a hinted slip (G1's unmet half in attempts 1 and 2); then the higher
// greedy success. On a tie the earlier checkpoint stays (a is not better).
func GateBetter(a, b ValPoint) bool { return G3Band.GateBetter(a, b) }

// GateBetter is attempt 3's keeping rule with band in place of G3's.
func (band Band) GateBetter(a, b ValPoint) bool {
	if band.Holds(a) != band.Holds(b) {
		return band.Holds(a)
	}
	if a.HintRight != b.HintRight {
		return a.HintRight > b.HintRight
	}
	return a.Success > b.Success
}

// GateProxy reports whether a validation eval passes the thresholds of G1 (hint
// and none next-call rates, the success gain) and G3's greedy band.
func GateProxy(v ValPoint) bool { return G3Band.GateProxy(v) }

// GateProxy is GateProxy with band in place of G3's.
func (band Band) GateProxy(v ValPoint) bool {
	return band.Holds(v) && v.HintRight >= 0.6 && v.NoneRight <= 0.25 && v.HintSuccess >= v.NoneSuccess+0.10
}

// validate checks what WarmStart would otherwise find late or never: the
// validation tasks fit the validation split (toolworld.Tasks would silently cut a
// larger count to the split's 200), and the band is a range.
func (cfg WarmStartConfig) validate() error {
	size := toolworld.SplitSizes[toolworld.SplitValidation]
	for _, f := range []struct {
		name string
		n    int
	}{{"val_tasks", cfg.ValTasks}, {"margin_tasks", cfg.MarginTasks}} {
		if f.n < 0 || f.n > size || f.name == "val_tasks" && f.n == 0 {
			return fmt.Errorf("warm start 3: %s %d: want 1–%d (the validation split's tasks)", f.name, f.n, size)
		}
	}
	if cfg.Band.Lo != 0 || cfg.Band.Hi != 0 {
		if err := cfg.Band.Validate(); err != nil {
			return fmt.Errorf("warm start 3: %w", err)
		}
	}
	return nil
}

// WarmStartResult is what protocol 3's warm start reached.
type WarmStartResult struct {
	Config    WarmStartConfig `json:"config"`
	Steps     int             `json:"steps"` // steps of the kept checkpoint
	Counts    DemoCounts      `json:"demos"`
	WorldKept map[string]int  `json:"world_kept,omitempty"` // per family, when WorldFamilies is set
	Copy      CopyCounts      `json:"copy,omitzero"`
	// SiblingCopy counts the sibling copy curriculum (Copy.Sibling).
	SiblingCopy CopyCounts `json:"sibling_copy,omitzero"`
	// KeyCopy counts the key copy curriculum (Copy.Key).
	KeyCopy    CopyCounts `json:"key_copy,omitzero"`
	Validation []ValPoint `json:"validation"`
	Kept       ValPoint   `json:"kept"`
	Stop       string     `json:"stop"`
	CPUSeconds float64    `json:"cpu_seconds"`
	WallSecs   float64    `json:"wall_seconds"`
}

// WarmStart trains protocol 3's warm start from cfg.Init and writes it to cfg.Out.
func WarmStart(ctx context.Context, backend backends.Backend, cfg WarmStartConfig, progress func(string)) (WarmStartResult, error) {
	t0, c0 := time.Now(), efficacy.CPUTime()
	res := WarmStartResult{Config: cfg}
	if err := cfg.validate(); err != nil {
		return res, err
	}
	p, err := efficacy.OpenPolicy(backend, cfg.Init)
	if err != nil {
		return res, err
	}
	demos, cnt, err := Demos(p.Tok, cfg.Demos, cfg.Demo, cfg.DemoMaxTokens, cfg.DemoMaxCalls, cfg.Seed)
	if err != nil {
		return res, err
	}
	res.Counts = cnt
	progress(fmt.Sprintf("warm start 3: %+v", cnt))
	if len(cfg.WorldFamilies) > 0 {
		var kept map[string]int
		if demos, kept, err = KeepFamilies(demos, cfg.Demos, cfg.WorldFamilies); err != nil {
			return res, err
		}
		res.WorldKept = kept
		progress(fmt.Sprintf("warm start 3: world demonstrations of %v only: %d kept %v", cfg.WorldFamilies, len(demos), kept))
	}
	var groups [][]credit.Sequence
	if cfg.Copy.PerBatch > 0 {
		if groups, res.Copy, err = CopyDemos(p.Tok, cfg.Copy, cfg.DemoMaxTokens, cfg.DemoMaxCalls, cfg.Seed); err != nil {
			return res, err
		}
		progress(fmt.Sprintf("warm start 3: copy curriculum %+v", res.Copy))
		if cfg.Copy.Sibling {
			sib, cnt, err := SiblingCopyDemos(p.Tok, cfg.Copy, cfg.DemoMaxTokens, cfg.DemoMaxCalls, cfg.Seed)
			if err != nil {
				return res, err
			}
			sib = SiblingShareOf(sib, cfg.Copy.SiblingShare)
			groups, res.SiblingCopy = append(groups, sib...), cnt
			progress(fmt.Sprintf("warm start 3: sibling copy curriculum %+v, %d groups pooled", cnt, len(sib)))
		}
		if cfg.Copy.Key {
			key, cnt, err := KeyCopyDemos(p.Tok, cfg.Copy, cfg.DemoMaxTokens, cfg.DemoMaxCalls, cfg.Seed)
			if err != nil {
				return res, err
			}
			groups, res.KeyCopy = append(groups, key...), cnt
			progress(fmt.Sprintf("warm start 3: key copy curriculum %+v", cnt))
		}
	}
	var marginTasks []toolworld.Task
	if cfg.MarginTasks > 0 {
		if marginTasks, err = toolworld.Tasks(toolworld.SplitValidation, cfg.MarginTasks); err != nil {
			return res, err
		}
	}
	opt := xla.DefaultAdamW()
	opt.LR, opt.WarmupSteps, opt.WeightDecay = cfg.LR, 20, 0
	tr, err := xla.NewTrainer(backend, p.Model, xla.TrainerOptions{Credit: efficacy.SFTCredit(), Optimizer: opt, Seed: cfg.Seed})
	if err != nil {
		return res, fmt.Errorf("warm start 3: %w", err)
	}
	val, err := toolworld.Tasks(toolworld.SplitValidation, cfg.ValTasks)
	if err != nil {
		return res, err
	}
	band := cfg.band()
	mix, err := HeldoutMix()
	if err != nil {
		return res, err
	}
	eval := func(step int, loss float64) (ValPoint, error) {
		v := ValPoint{Step: step, Loss: loss}
		st, byFamily, err := efficacy.EvaluateFamilies(ctx, p, val, cfg.World)
		if err != nil {
			return v, err
		}
		v.Success, v.ByFamily = st.Success, byFamily
		v.MixSuccess = MixSuccess(v.ByFamily, mix)
		none, _, err := efficacy.LiveEval(ctx, p, val, cfg.LiveWorld, efficacy.LiveNone, 0, 0)
		if err != nil {
			return v, err
		}
		hint, _, err := efficacy.LiveEval(ctx, p, val, cfg.LiveWorld, efficacy.LiveHint, 0, 0)
		if err != nil {
			return v, err
		}
		sib, _, err := efficacy.LiveEval(ctx, p, val, cfg.LiveWorld, efficacy.LiveSibling, 0, 0)
		if err != nil {
			return v, err
		}
		v.NoneSuccess, v.HintSuccess, v.NoneRight, v.HintRight = none.Success, hint.Success, none.RightRate, hint.RightRate
		v.SiblingSuccess, v.SiblingRight = sib.Success, sib.RightRate
		v.NoneAfter, v.NoneNext, v.HintAfter, v.HintNext = none.After, none.NextRight, hint.After, hint.NextRight
		v.SiblingAfter, v.SiblingNext, v.SiblingSlips = sib.After, sib.NextRight, sib.Slips
		v.Passes = band.GateProxy(v)
		if len(marginTasks) > 0 {
			d, err := efficacy.ProbeSplit(ctx, backend, p, marginTasks, cfg.World, 1, ProbeSeed)
			if err != nil && !errors.Is(err, efficacy.ErrNoSlip) { // no slip: no margin, 0 slips
				return v, err
			}
			v.Margin, v.MarginSlips, v.MarginAbove = d.All.MarginGain, d.All.Slips, d.All.AboveHint
			progress(fmt.Sprintf("warm start 3: step %d deciding-token margin %+.2f nats (empty %+.2f → hint %+.2f) over %d validation slips, right's token likelier after the hint at %d; repeat rest %+.2f",
				step, d.All.MarginGain, d.All.MarginEmpty, d.All.MarginHint, d.All.Slips, d.All.AboveHint, d.All.RepeatRest))
		}
		v.CPUSeconds = (efficacy.CPUTime() - c0).Seconds()
		progress(fmt.Sprintf("warm start 3: step %d loss %.3f validation success %.1f%% of %d (held-out mix %.1f%%); live none %.1f%% (next right %d/%d), hint %.1f%% (next right %d/%d), sibling %.1f%% (next right %d/%d); in band %v, passes %v; cpu %.0fs wall %.0fs",
			step, loss, 100*v.Success, len(val), 100*v.MixSuccess, 100*none.Success, none.NextRight, none.After, 100*hint.Success, hint.NextRight, hint.After,
			100*sib.Success, sib.NextRight, sib.After, band.Holds(v), v.Passes, v.CPUSeconds, time.Since(t0).Seconds()))
		return v, nil
	}
	since := 0
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x73667403))
	draw := newCopyBatches(demos, groups, rng)
	better := band.GateBetter
	if cfg.KeepByMargin {
		better = band.MarginBetter
	}
	res.Stop = fmt.Sprintf("reached %d steps", cfg.Steps)
	for step := 1; step <= cfg.Steps; step++ {
		met, err := tr.Step(ctx, draw.batch(cfg.Batch, cfg.Copy.PerBatch))
		if err != nil {
			return res, fmt.Errorf("warm start 3 step %d: %w", step, err)
		}
		if step%25 == 0 {
			progress(fmt.Sprintf("warm start 3: step %d loss %.3f cpu %.0fs wall %.0fs", step, met.Loss, (efficacy.CPUTime() - c0).Seconds(), time.Since(t0).Seconds()))
		}
		spent := cfg.WallBudget > 0 && time.Since(t0) > cfg.WallBudget
		if step%cfg.EvalEvery != 0 && step != cfg.Steps && !spent {
			continue
		}
		v, err := eval(step, met.Loss)
		if err != nil {
			return res, err
		}
		res.Validation = append(res.Validation, v)
		// Out holds the first checkpoint that passes or, while none has, the best by
		// GateBetter (attempt 2 kept its last, 15%, and lost the 45% checkpoint three
		// evals earlier).
		isBetter := len(res.Validation) == 1 || better(v, res.Kept)
		if v.Passes || isBetter {
			if err := efficacy.SaveModel(tr, cfg.Init, cfg.Out); err != nil {
				return res, err
			}
			res.Steps, res.Kept = step, v
		}
		if v.Passes {
			res.Stop = fmt.Sprintf("step %d: the first checkpoint whose validation evals pass G1's hint and none thresholds inside the band %.0f–%.0f%% (held-out mix %v)", step, 100*band.Lo, 100*band.Hi, band.Mix)
			break
		}
		if v.Success > 0.45 && !cfg.KeepByMargin && !cfg.KeepByHint {
			res.Stop = fmt.Sprintf("step %d: validation success %.1f%% above G3's 45%% ceiling", step, 100*v.Success)
			break
		}
		if spent {
			res.Stop = fmt.Sprintf("step %d: the wall budget of %s is spent", step, cfg.WallBudget)
			break
		}
		if isBetter {
			since = 0
		} else if since++; cfg.Patience > 0 && since >= cfg.Patience && !cfg.KeepByMargin && !cfg.KeepByHint {
			res.Stop = fmt.Sprintf("step %d: no eval better (GateBetter) than step %d's for %d evals", step, res.Steps, since)
			break
		}
	}
	res.CPUSeconds, res.WallSecs = (efficacy.CPUTime() - c0).Seconds(), time.Since(t0).Seconds()
	progress("warm start 3: " + res.Stop)
	return res, nil
}

// ParseBand reads a band written as "lo,hi" in fractions ("0.33,0.42").
func ParseBand(s string) (Band, error) {
	lo, hi, ok := strings.Cut(s, ",")
	if !ok {
		return Band{}, fmt.Errorf("band %q: want lo,hi (fractions, e.g. 0.33,0.42)", s)
	}
	var b Band
	var err error
	if b.Lo, err = strconv.ParseFloat(strings.TrimSpace(lo), 64); err != nil {
		return Band{}, fmt.Errorf("band %q: lo: %w", s, err)
	}
	if b.Hi, err = strconv.ParseFloat(strings.TrimSpace(hi), 64); err != nil {
		return Band{}, fmt.Errorf("band %q: hi: %w", s, err)
	}
	if err := b.Validate(); err != nil {
		return Band{}, err
	}
	return b, nil
}

// HeldoutMix is the held-out split's family mix: each family's share of its 250
// tasks (the gates' G3 reads success over this mix).
func HeldoutMix() (map[string]float64, error) {
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	if err != nil {
		return nil, err
	}
	mix := map[string]float64{}
	for _, t := range held {
		mix[t.Family] += 1 / float64(len(held))
	}
	return mix, nil
}

// MixSuccess weights per-family success rates by mix; families that byFamily lacks
// are left out and the rest's weights renormalised (0 when none is left).
func MixSuccess(byFamily, mix map[string]float64) float64 {
	var sum, w float64
	for f, s := range byFamily {
		sum += mix[f] * s
		w += mix[f]
	}
	if w == 0 {
		return 0
	}
	return sum / w
}
