// Package eval evaluates checkpoints: the inner loop's answer to "did this checkpoint
// improve?" (docs/design.md, The two loops).
//
//	train/  writes checkpoint step-N ──► eval.Runner.Run(step, dir, policy)
//	                                        │ device suites, on the device goroutine, each
//	                                        │ within a budget (likelihood, toolworld)
//	                                        │ command suites, child processes, in the background
//	                                        ▼
//	                                     Recorder: <data_dir>/evals.jsonl (fsynced lines),
//	                                     latest result per suite, best checkpoint per suite
//
// A suite that fails is recorded with its error and never stops training.
package eval
