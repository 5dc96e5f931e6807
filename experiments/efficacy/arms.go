package efficacy

import (
	"fmt"

	"github.com/hindsight-ai/hindsight/credit"
)

// The arms' names.
const (
	ArmOutcome  = "outcome"   // outcome-only: λ_hint = 0, no teacher
	ArmHint     = "hint"      // hint credit: rules teacher, default λs
	ArmHintOnly = "hint-only" // λ_out = 0
)

// ArmSpec is what differs between arms: the credit and whether the teacher runs.
type ArmSpec struct {
	Name   string
	Credit credit.Config
	Hints  bool
}

// SpecOf returns the spec of the arm called name. Every arm shares credit.DefaultConfig
// but for the λs.
func SpecOf(name string) (ArmSpec, error) {
	c := credit.DefaultConfig()
	switch name {
	case ArmOutcome:
		c.LambdaHint = 0
		return ArmSpec{Name: name, Credit: c}, nil
	case ArmHint:
		return ArmSpec{Name: name, Credit: c, Hints: true}, nil
	case ArmHintOnly:
		c.LambdaOut = 0
		return ArmSpec{Name: name, Credit: c, Hints: true}, nil
	}
	return ArmSpec{}, fmt.Errorf("arm %q: want %s, %s or %s", name, ArmOutcome, ArmHint, ArmHintOnly)
}
