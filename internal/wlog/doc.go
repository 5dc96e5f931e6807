// Package wlog is the project's one durable line log: an append-only file of records,
// one line each, every append fsynced before it returns. The spool's journal
// (rollout.Journal), the ledger's skip log, the eval recorder's evals.jsonl and the
// gateway's session journals are each a Log; this package owns their one rule for
// appending, replaying and repairing, as Prometheus' tsdb/wlog does for its WAL
// (docs/storage.md "The line log"):
//
//   - Append writes the record and its newline and fsyncs. When the write or the fsync
//     fails (a full disk), the file is cut back to the last whole line before Append
//     returns, so a retry never lands after half a line.
//   - Open replays every whole line in order. A last line without its newline, or a
//     last line the reader cannot decode, is a write a crash cut short: it was never
//     acknowledged, so Open cuts it off.
//   - A line the reader cannot decode with more lines after it is not a torn write:
//     Open refuses the file with a *CorruptionError naming the file, the line and its
//     byte offset, and changes nothing, rather than dropping the records after it.
//   - Rewrite replaces the whole log (compaction) by a temp file, fsync, rename and
//     directory fsync; Open removes the temp file a crash left.
//
// It sits below every stage and imports nothing from the project but fsutil.
package wlog
