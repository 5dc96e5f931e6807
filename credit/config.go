package credit

import (
	"errors"
	"fmt"
	"math"
)

// Base is what the teacher log-prob is compared with.
type Base string

// The two bases of docs/design.md.
const (
	// BaseStudent compares with s_t, the plain pass (cheapest with the live teacher).
	BaseStudent Base = "student"
	// BaseEmptyHint compares with q_t(∅), the same template with an empty hint: it
	// isolates the hint from the template's own shift and from teacher weight drift.
	BaseEmptyHint Base = "empty_hint"
)

// Baseline is what the outcome advantage subtracts from the reward.
type Baseline string

// The outcome baselines.
const (
	// BaselineGroup: leave-one-out mean of the task group in the step, else the running
	// mean (docs/design.md's default).
	BaselineGroup Baseline = "group"
	// BaselineNone: A_out = R. With λ_hint = 0, rewards of 1 and allow_no_sampler this
	// is supervised fine-tuning on demonstrations (advantage 1 on their policy tokens).
	BaselineNone Baseline = "none"
)

// Gate bounds Δ_t into the hint advantage.
type Gate string

// The gates of docs/design.md; both are 0 at Δ = 0 and keep the sign.
const (
	GateClip Gate = "clip" // clip(Δ, −c, c)
	GateTanh Gate = "tanh" // c·tanh(Δ/c)
)

// Normalize says how the loss terms are normalised.
type Normalize string

// The normalisations.
const (
	// NormalizeBudget divides every term by N, the step's token budget, and mixes the
	// hint advantage into the outcome advantage: A_t = λ_out·A_out + λ_hint·A_hint,t
	// (docs/design.md's loss; the default).
	NormalizeBudget Normalize = "budget"
	// NormalizeSeparate keeps the outcome term and the distillation term apart, each
	// divided by its own token count and weighed by λ_out and λ_distill:
	//
	//	loss = λ_out/N_out·Σ −ρ_t·A_out·log π_θ(y_t) + λ_distill/N_distill·Σ ℓ_t
	//
	// N_out: trainable tokens of the rollouts with a reward; N_distill: trainable tokens
	// inside a teacher span; ℓ_t = −ρ_t·A_hint,t·log π_θ(y_t) in mode sampled_token, the
	// divergence D_t of DistillPosition in modes topk and full. A step with one hinted
	// rollout among many then still gets the whole distillation weight, and a step with
	// no reward the whole outcome weight is not spent on nothing.
	NormalizeSeparate Normalize = "separate"
)

// Config holds the knobs of the credit math. Defaults: DefaultConfig.
type Config struct {
	Base Base `yaml:"base"`
	Gate Gate `yaml:"gate"`
	// Clip is c, the bound of the hint advantage in nats.
	Clip float64 `yaml:"clip"`
	// LambdaOut and LambdaHint weigh the outcome advantage (reward units) and the hint
	// advantage (nats) in A_t = λ_out·A_out + λ_hint·A_hint,t.
	LambdaOut  float64 `yaml:"lambda_out"`
	LambdaHint float64 `yaml:"lambda_hint"`
	// RhoMax truncates the importance weight ρ_t = min(exp(s_t − μ_t), ρ_max).
	RhoMax float64 `yaml:"rho_max"`
	// KLBeta weighs the optional KL(π_θ‖π_ref) penalty; 0 turns it off.
	KLBeta float64 `yaml:"kl_beta"`
	// Baseline is the outcome baseline: group (default) or none.
	Baseline Baseline `yaml:"baseline"`
	// BaselineRate is the rate of the running mean reward used for a rollout that is
	// alone in its task group within a step: mean ← mean + rate·(R − mean).
	BaselineRate float64 `yaml:"baseline_rate"`
	// AllowNoSampler makes rollouts without any sampler log-prob trainable, with
	// importance weight 1 (they are counted in Stats either way): demonstrations,
	// corrected answers, conversations from an engine that returned no log-probs.
	// Their trainable tokens are their policy segments past the role header
	// (train.Rule).
	AllowNoSampler bool `yaml:"allow_no_sampler"`
	// Normalize is budget (default: every term over N, the hint mixed into A_t with
	// λ_hint) or separate (the outcome and distillation terms each over their own
	// token count, weighed by λ_out and λ_distill).
	Normalize Normalize `yaml:"normalize"`
	// LambdaDistill weighs the distillation term under normalize: separate (where it
	// takes λ_hint's place).
	LambdaDistill float64 `yaml:"lambda_distill"`
	// Distill is how the teacher's view becomes a loss (credit.distill).
	Distill DistillConfig `yaml:"distill"`
}

// DefaultConfig returns the defaults: base s_t, clip at 2 nats, λ_out = 1, λ_hint = 0.5
// (a clipped hint advantage spans ±1, the same order as a 0/1 reward's advantage),
// ρ_max = 2, no KL, baseline rate 0.1; budget normalisation, λ_distill = 1 for when
// it is separate; distillation sampled_token (DefaultDistillConfig).
func DefaultConfig() Config {
	return Config{Base: BaseStudent, Gate: GateClip, Clip: 2, LambdaOut: 1, LambdaHint: 0.5, RhoMax: 2, Baseline: BaselineGroup, BaselineRate: 0.1,
		Normalize: NormalizeBudget, LambdaDistill: 1, Distill: DefaultDistillConfig()}
}

// Validate names the first bad field.
func (c *Config) Validate() error {
	switch c.Base {
	case BaseStudent, BaseEmptyHint:
	default:
		return fmt.Errorf("base: %q is not student or empty_hint", c.Base)
	}
	switch c.Baseline {
	case BaselineGroup, BaselineNone:
	case "":
		c.Baseline = BaselineGroup // configs and checkpoints written before the field
	default:
		return fmt.Errorf("baseline: %q is not group or none", c.Baseline)
	}
	switch c.Normalize {
	case NormalizeBudget, NormalizeSeparate:
	case "":
		c.Normalize = NormalizeBudget // configs and checkpoints written before the field
	default:
		return fmt.Errorf("normalize: %q is not budget or separate", c.Normalize)
	}
	if err := c.Distill.Validate("distill."); err != nil {
		return err
	}
	switch c.Gate {
	case GateClip, GateTanh:
	default:
		return fmt.Errorf("gate: %q is not clip or tanh", c.Gate)
	}
	for _, f := range []struct {
		name string
		v    float64
		pos  bool
	}{{"clip", c.Clip, true}, {"lambda_out", c.LambdaOut, false}, {"lambda_hint", c.LambdaHint, false}, {"lambda_distill", c.LambdaDistill, false},
		{"rho_max", c.RhoMax, true}, {"kl_beta", c.KLBeta, false}, {"baseline_rate", c.BaselineRate, false}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || (f.pos && f.v == 0) {
			want := "non-negative"
			if f.pos {
				want = "positive"
			}
			return fmt.Errorf("%s: %v must be finite and %s", f.name, f.v, want)
		}
	}
	if c.BaselineRate > 1 {
		return errors.New("baseline_rate: must be at most 1")
	}
	return nil
}
