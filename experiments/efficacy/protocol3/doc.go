// Package protocol3 is protocol 3 of the efficacy experiment (issue 27,
// docs/experiments/protocol3.md): its config and task world, the scripted
// demonstrations and the copy curriculum, the warm start, the gates (G1–G3) and the
// outcome-only pilot (G4), the arms' run behind the gate check, their results and
// paired ratios, and the probe on a real model. It runs on the harness of package
// efficacy (the runner, the arms' teachers, the hint stage, the slip tracker, the live
// evals and probes), which does not import it; only bench/efficacy imports it.
package protocol3
