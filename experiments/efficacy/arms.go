package efficacy

import (
	"fmt"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// The arms' names.
const (
	ArmOutcome  = "outcome"   // outcome-only: λ_hint = 0, no teacher
	ArmHint     = "hint"      // hint credit: rules teacher, default λs (protocol 3: the world rules' hints, ArmSpec3)
	ArmHintOnly = "hint-only" // λ_out = 0
)

// What an arm's teacher sees (ArmSpec.Context).
const (
	// ContextNone: no teacher (outcome-only).
	ContextNone = ""
	// ContextRules: the hint stage of Config.Hints (protocols 1 and 2, Hinter).
	ContextRules = "rules"
	// ContextSDPO: the daemon's teacher (teacher.Hinter) with teacher.context sibling
	// and feedback: a successful rollout of the same task and step, and the
	// environment's output for a failed call (protocol 3's sdpo arm).
	ContextSDPO = "sibling+feedback"
	// ContextWorld: protocol 3's world rules (SlipHint) at the retry turn.
	ContextWorld = "world-rules"
	// ContextPlacebo: ContextWorld's hints shuffled across the step's tasks
	// (Hinter.Placebo).
	ContextPlacebo = "world-rules-shuffled"
)

// ArmSpec is what differs between arms: the credit, the teacher's weights and what
// the teacher sees.
type ArmSpec struct {
	Name    string
	Credit  credit.Config
	Teacher xla.TeacherModelConfig
	Context string
}

// Hints reports whether the arm runs a teacher.
func (s ArmSpec) Hints() bool { return s.Context != ContextNone }

// SpecOf returns the spec of protocol 1 and 2's arm called name. Every arm shares
// credit.DefaultConfig but for the λs, and the live teacher.
func SpecOf(name string) (ArmSpec, error) {
	c := credit.DefaultConfig()
	s := ArmSpec{Name: name, Credit: c, Teacher: xla.DefaultTeacherModel(), Context: ContextRules}
	switch name {
	case ArmOutcome:
		s.Credit.LambdaHint, s.Context = 0, ContextNone
		return s, nil
	case ArmHint:
		return s, nil
	case ArmHintOnly:
		s.Credit.LambdaOut = 0
		return s, nil
	}
	return ArmSpec{}, fmt.Errorf("arm %q: want %s, %s or %s", name, ArmOutcome, ArmHint, ArmHintOnly)
}

// Spec returns the spec of arm name under the config's protocol (SpecOf, or ArmSpec3
// when Protocol is 3).
func (c Config) Spec(name string) (ArmSpec, error) {
	if c.Protocol == 3 {
		return ArmSpec3(name, c.Distill)
	}
	return SpecOf(name)
}

// Protocol 3's arms besides ArmOutcome and ArmHint (docs/experiments/protocol3.md
// "Arms").
const (
	// ArmSDPO: the teacher sees a successful sibling and the environment's feedback
	// (ContextSDPO), logit distillation, an EMA teacher, with the outcome term.
	ArmSDPO = "sdpo"
	// ArmPlacebo: ArmHint with the hints shuffled across tasks (ContextPlacebo).
	ArmPlacebo = "placebo"
)

// Arms3 are protocol 3's arms in report order.
var Arms3 = []string{ArmOutcome, ArmSDPO, ArmHint, ArmPlacebo}

// ArmSpec3 returns protocol 3's arm called name. Every arm has the same credit
// config — normalize separate (the outcome term over its own tokens, so its scale is
// the same in every arm), λ_out 1, λ_distill 1, distillation mode (full or topk with
// k 100) with JSD α 0.5, SDPO's choice, no clip — except that outcome-only has no
// distillation term (λ_hint = λ_distill = 0) and the live teacher (it never scores a
// teacher pass); the hinted arms use an EMA teacher at rate 0.05 (SDPO's). What the
// teacher sees (Context) is the difference between the hinted arms.
func ArmSpec3(name string, mode credit.DistillMode) (ArmSpec, error) {
	if mode == "" {
		mode = credit.DistillFull
	}
	c := credit.DefaultConfig()
	c.Base, c.Normalize, c.LambdaOut, c.LambdaDistill = credit.BaseStudent, credit.NormalizeSeparate, 1, 1
	// Pre-registered before issue 37 changed credit's defaults: the teacher's top k
	// (topk), the exact tail, no importance weight on the divergence. Kept explicit so
	// the arms stay as registered.
	c.Distill = credit.DistillConfig{Mode: mode, TopK: 100, Divergence: credit.DivJSD, JSDAlpha: 0.5, ClipScope: credit.ClipEntry,
		TopKIDs: credit.IDsTeacher, Tail: credit.TailExact, ISCap: 0}
	s := ArmSpec{Name: name, Credit: c, Teacher: xla.TeacherModelConfig{Mode: xla.TeacherEMA, RefreshEvery: 100, EMARate: 0.05}}
	switch name {
	case ArmOutcome:
		s.Credit.LambdaHint, s.Credit.LambdaDistill, s.Teacher, s.Context = 0, 0, xla.DefaultTeacherModel(), ContextNone
	case ArmSDPO:
		s.Context = ContextSDPO
	case ArmHint:
		s.Context = ContextWorld
	case ArmPlacebo:
		s.Context = ContextPlacebo
	default:
		return ArmSpec{}, fmt.Errorf("arm %q: protocol 3's arms are %v", name, Arms3)
	}
	if mode == credit.DistillSampledToken {
		return ArmSpec{}, fmt.Errorf("arm %s: distillation mode %s: protocol 3 distils logits (%s or %s)", name, mode, credit.DistillFull, credit.DistillTopK)
	}
	return s, s.Credit.Validate()
}

// SDPOTeacher is the sdpo arm's teacher.Config: the daemon's teacher with
// teacher.context sibling and feedback and no written hint — the chain is the
// feedback teacher (a person's comments, which the task world has none of), selection
// on tool errors only — in the byte tokenizer's hint turn (HintTemplate).
func SDPOTeacher() teacher.Config {
	cfg := teacher.DefaultConfig()
	cfg.Chain = []string{teacher.TeacherFeedback}
	cfg.Select.Rules = []teacher.Reason{teacher.ReasonToolError}
	cfg.Template = HintTemplate
	cfg.Context.Sources = []string{teacher.ContextSibling, teacher.ContextFeedback}
	return cfg
}
