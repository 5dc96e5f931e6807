// Package efficacy is the efficacy experiment (issues 17 and 27: does hint credit learn
// faster than outcome-only?): the warm start, the arms on the bundled task world, the
// probe and gates, and the numbers the reports give (threshold, rollouts-to-threshold
// per seed, the ratio with its spread, success at equal budget), drawn with gonum/plot.
// It sits above the stages (it drives collect/, teacher/, train/ and xla/ like a user),
// so it lives beside bench/, not in internal/; only bench/efficacy imports it. The
// reports are under docs/experiments/.
package efficacy
