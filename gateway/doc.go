// Package gateway is the outer loop's front door: an OpenAI-compatible chat
// completions server (POST /v1/chat/completions, GET /v1/models) that answers with
// hindsight's own sampler on the newest checkpoint and records every conversation as
// a rollout in the spool's incoming/ folder, exactly as the collector writes one.
//
// Where it sits in the data flow (docs/design.md "Data flow"): agents and people →
// gateway → spool/incoming/*.arrow → the daemon's stages. It reads checkpoints (the
// `latest` link, polled) and writes its per-session journals under
// <data_dir>/state/gateway/, finished rollout files, and with gateway.ab the A/B
// test's state and decision history under <data_dir>/state/ab/ (ab*.go: a candidate
// checkpoint beside the default for a seeded share of new sessions, sticky per
// session, promoted or rolled back by rule; the statistics are gateway/abstat).
//
// Recording without drift: a session keeps the token ids the model sampled; a
// follow-up request that extends the session's messages appends only the new
// messages' rendered tokens (the difference between two renders of the model's own
// chat template), never re-tokenising earlier turns. Every answered turn is appended
// to the session's journal and fsynced before the response is written, so a crash
// loses no acknowledged turn; a restart reopens the journals' sessions, which end
// (and are written as rollouts) once, like any other. docs/gateway.md is the user's
// guide.
package gateway
