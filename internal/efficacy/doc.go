// Package efficacy turns the eval curves of the efficacy experiment's arms (issue 17:
// does hint credit learn faster than outcome-only?) into the numbers the reports under
// docs/experiments/ give: the threshold, rollouts-to-threshold per seed, the ratio with
// its spread, success at equal budget; and draws them as a PNG.
package efficacy
