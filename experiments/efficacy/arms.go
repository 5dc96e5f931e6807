package efficacy

import (
	"fmt"

	"github.com/hindsight-ai/hindsight/credit"
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
