// Package train owns the device: one goroutine (Loop.Run) takes rollouts with their
// hints in journal order, batches them, and runs score → credit → optimizer step →
// checkpoint on the xla.Trainer, in order. Nothing else touches the Trainer.
//
// In the data flow (docs/design.md) it comes after the teacher and before the outputs:
//
//	spool (claim, decide) ──► daemon feed ──► teacher ×K ──► train.Loop ──► checkpoint, credit files
//	                                                            │
//	                                                            └──► ledger (staged rows, skips, when a file is finished)
//
// Everything the loop needs is passed in (Options: config, the ledger, the pause
// state, the disk-full retry; an Observer for stats and progress); it reaches
// nothing else. Whether a rollout is trained and when a file is finished is the
// ledger's rule; the loop reports finished files to the Observer (FileDone).
//
// adapt.go is the one adapter between the stages' types: rollout.Rollout plus
// teacher hints → credit.Sequence, and the trainer's credit → creditfile.Row, with the
// one trainable-token rule (Rule: a sampler log-prob, or credit.allow_no_sampler and
// the role header).
package train
