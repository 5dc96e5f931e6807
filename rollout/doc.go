// Package rollout owns the rollout file format: the Arrow schema of docs/design.md, the
// streaming reader and writer, validation with stable problem codes, synthetic rollouts,
// and the spool with its journal.
//
// It sits at the top of the data flow: collectors drop files into the spool's incoming/
// folder, the spool claims them, the reader hands out validated rollouts whose token and
// log-prob slices point into Arrow buffers, and the journal records, in claim order,
// whether each rollout was accepted or rejected. It knows nothing about models.
//
// The spool owns every read of a claimed file: Spool.Process decides its rows once,
// Spool.Accepted re-streams the accepted ones for training (one record batch in
// memory), and Spool.Finish, the one place a file leaves processing/, is idempotent.
package rollout
