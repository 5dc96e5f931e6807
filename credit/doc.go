// Package credit turns student and teacher log-probs into per-token credit: the math of
// docs/design.md "Credit math" in plain float64 Go. It is the reference the device loss is
// tested against, and it imports nothing from the project and nothing from GoMLX.
//
// Data flow: xla/ scores s_t (student) and q_t(h) (teacher with hint h, and optionally
// q_t(∅)); credit computes Δ_t, gates it into the hint advantage, adds the
// leave-one-out outcome advantage, applies the truncated importance weight, and hands
// per-token loss weights back to xla/ for the policy-gradient step.
//
// distill.go holds the distillation losses (credit.distill: sampled_token, topk with a
// tail bucket, full; reverse KL, forward KL, JSD; OPSD's clip) as values and gradients
// in the student's logits at one position, the reference the device's chunked loss is
// to be tested against. Config.Normalize keeps the outcome and distillation terms
// apart (each over its own token count); Stats and LossTerms report both.
// docs/distillation.md says when to use which.
package credit
