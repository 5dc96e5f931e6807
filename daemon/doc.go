// Package daemon is hindsightd's body: it opens what the stages share and runs them
// (daemon.Run reads as that list, per mode: stages.go), publishes the status that
// the status port (package status) serves, talks to systemd, pauses on an
// operator's request or a full disk, and drains on SIGTERM. cmd/hindsightd only parses flags and calls Run (or its -demo, which runs
// Run with Options.Drain and prints Events).
//
// Who owns what, following one rollout from claim to checkpoint:
//
//   - rollout.Spool: claiming, deciding (the journal) and every read of a claimed
//     file; Spool.Accepted re-streams a decided file's accepted rows for training,
//     Spool.Finish moves a file out of processing/ (idempotently, in one place).
//   - daemon (ingest.go, pipeline.go): the ingest loop drives the spool; feed sends
//     the accepted rows, as futures, to the teacher workers and the device queue.
//   - teacher.Hinter: the hints of a rollout, each with its template tokens and its
//     empty-hint template.
//   - train.Loop: the device goroutine; batches, steps, checkpoints (the one adapter
//     between the stages' types is train/adapt.go).
//   - ledger.Ledger: "trained": staged credit rows, the skip log, publish-once, and
//     when a file is finished.
//
// The daemon's own state is the status (stats: snapshots readers never lock), the
// pause state (pauser) and the queues; no stage holds a pointer to the daemon.
package daemon
