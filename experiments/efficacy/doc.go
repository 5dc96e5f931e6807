// Package efficacy is the efficacy experiment (issues 17 and 27: does hint credit learn
// faster than outcome-only?): the harness every protocol runs on — the runner and its
// arms, the hint stage, the task world's rules and slip tracker, the live evals and
// probes, and the numbers the reports give (threshold, rollouts-to-threshold per seed,
// the ratio with its spread, success at equal budget), drawn with gonum/plot — and
// protocols 1 and 2's warm start and probe. Protocol 3's own parts are in its
// subpackage protocol3, which imports this one (never the reverse).
// It sits above the stages (it drives collect/, teacher/, train/ and xla/ like a user),
// so it lives beside bench/, not in internal/; only bench/efficacy imports it. The
// reports are under docs/experiments/.
package efficacy
