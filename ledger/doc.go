// Package ledger owns "trained": the one answer to whether a rollout of a file in
// processing/ is in the weights, and when that file is finished.
//
// In the data flow (docs/design.md) it sits beside the device loop (package train), in
// the write-ahead-log style of Prometheus' tsdb/wlog: every fact it relies on is
// durable before it is used, and a crash at any point replays to the same answer.
//
//   - A rollout is trained once a durable checkpoint lists it (the checkpoint's
//     trainer_state.json trained list: the ledger's Trained when it was written,
//     handed back to Restore at start-up),
//     or once it is in the skip log (skipped for policy lag, an fsynced line), or
//     once the device gave up on it (too long for the model: counted, never retried).
//   - Its credit row is staged in <state>/credit/<claimed>/<row>.arrow before that
//     checkpoint, and fsynced (Sync) before the checkpoint is written.
//   - A file is finished once all of its accepted rollouts are trained: its staged
//     rows are published as <output>/<claimed>.credit.arrow (never replacing a
//     published file, so a crash after publishing cannot publish twice), the spool
//     finishes it (idempotently), and its staging folder goes.
//
// Open joins, at start-up, the journal's unfinished claims, the checkpoint's trained
// list, the skip log and the staging folders; nothing else does. The ledger is used
// by one goroutine, the one that owns the device.
package ledger
