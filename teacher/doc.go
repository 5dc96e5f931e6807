// Package teacher decides where a rollout deserves a hint, writes the hint, and turns
// it into tokens placed where docs/design.md "Where a hint goes" says.
//
// It sits between rollout/ and the model stages:
//
//	rollout/   validated Rollout (tokens, segments, sampler log-probs)
//	   ▼
//	teacher/   Select: segments worth a hint, each with insert_at (its policy turn's
//	           start), the end of the scored range, and the reason it was chosen
//	           Teacher chain (feedback → rules → openai): hint text per selection
//	           leak guard: drop hints that paste the segment or later tool output
//	           Inserter: hint text → template tokens (injection-safe encoding),
//	           spliced in at insert_at; the empty-hint variant for the q(∅) base
//	   ▼
//	xla/       teacher pass over [insert_at, end) with the hint in front
//
// The package works on token ids and text only: it never touches tensors, imports no
// GoMLX and nothing from daemon/ or cmd/. The daemon embeds Config under its
// `teacher:` key and publishes Stats snapshots in its status.
//
// Failure policy: a teacher that fails (timeout, 429, 5xx, malformed reply, open
// circuit breaker, …) never blocks. The selection simply gets no hint, so the rollout
// trains on its outcome signal alone there, unless on_failure is "hold", in which case
// Result.Hold asks the caller to keep the rollout back and try again later. Every
// failure is counted in Stats.
package teacher
