// Package credit turns student and teacher log-probs into per-token credit: the math of
// docs/design.md "Credit math" in plain float64 Go. It is the reference the device loss is
// tested against, and it imports nothing from the project and nothing from GoMLX.
//
// Data flow: xla/ scores s_t (student) and q_t(h) (teacher with hint h, and optionally
// q_t(∅)); credit computes Δ_t, gates it into the hint advantage, adds the
// leave-one-out outcome advantage, applies the truncated importance weight, and hands
// per-token loss weights back to xla/ for the policy-gradient step.
package credit
