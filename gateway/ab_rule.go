package gateway

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/hindsight-ai/hindsight/gateway/abstat"
)

// ABStats is the A/B test now (status, /metrics, the status page).
type ABStats struct {
	Round      int64
	Since      time.Time
	Share      float64
	Seed       uint64
	Metric     string
	Margin     float64
	Confidence float64
	Auto       bool
	// Arms are the default, then the candidate when one is in test.
	Arms []ArmStats
	// Diff is the candidate's metric minus the default's, with its interval at
	// Confidence (Newcombe's for thumbs_up, the bootstrap's for reward); valid
	// with a candidate and data on both arms.
	Diff    abstat.Interval
	HasDiff bool
	// Verdict is what the rule says now, in words; Losing is true while the
	// candidate is behind by more than the margin at Confidence (the rule rolls it
	// back when Auto and min_sessions allow).
	Verdict string
	Losing  bool
	// Decisions are the newest decisions (at most 20, oldest first); Promotions
	// and Rollbacks count the whole history.
	Decisions             []Decision
	Promotions, Rollbacks int64
}

// ArmStats are one arm's counts in the round.
type ArmStats struct {
	Role       string
	Checkpoint Checkpoint
	// Model is, with gateway.upstream, the model id its requests name.
	Model string
	// Sessions assigned to it, turns answered, and their mean latency (seconds,
	// request to answer).
	Sessions, Turns int64
	LatencyMean     float64
	// Rated sessions (their latest rating counts), by rating, and comments.
	Rated, Up, Flat, Down, Comments int64
	// ThumbsUp is Up/Rated with its Wilson interval.
	ThumbsUp abstat.Interval
	// Outcomes are sessions closed with a reward; Reward their mean with its
	// bootstrap interval (NaN without outcomes).
	Outcomes int64
	Reward   abstat.Interval
}

// n is the arm's sessions with the metric's data.
func (s *ArmStats) n(metric string) int64 {
	if metric == MetricReward {
		return s.Outcomes
	}
	return s.Rated
}

// est is the arm's metric.
func (s *ArmStats) est(metric string) float64 {
	if metric == MetricReward {
		return s.Reward.Est
	}
	return s.ThumbsUp.Est
}

// stats computes the round's statistics, cached until the state changes.
func (a *abTest) stats() ABStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache.version == a.version && a.cache.st.Round == a.round && a.version > 0 &&
		(!a.cache.stale || time.Since(a.boot.at) < bootEvery) {
		return a.cache.st
	}
	c := a.cfg
	st := ABStats{Round: a.round, Since: a.started, Share: c.Share, Seed: c.Seed, Metric: c.Metric, Margin: c.Margin,
		Confidence: c.Confidence, Auto: c.Auto}
	rewards := map[string][]float64{}
	ids := make([]string, 0, len(a.sess))
	for id := range a.sess {
		ids = append(ids, id)
	}
	sort.Strings(ids) // the bootstrap's input in a fixed order
	arms := map[string]*ArmStats{}
	var latency = map[string]float64{}
	for _, role := range []string{ArmDefault, ArmCandidate} {
		ck := a.def
		if role == ArmCandidate {
			ck = a.cand
		}
		if ck == nil {
			continue
		}
		st.Arms = append(st.Arms, ArmStats{Role: role, Checkpoint: *ck})
	}
	for i := range st.Arms {
		arms[st.Arms[i].Role] = &st.Arms[i]
	}
	for _, id := range ids {
		s := a.sess[id]
		m := arms[s.arm]
		if m == nil {
			continue
		}
		m.Sessions++
		m.Turns += int64(s.turns)
		latency[s.arm] += s.latency
		m.Comments += int64(s.comments)
		if s.rating != nil {
			m.Rated++
			switch *s.rating {
			case 1:
				m.Up++
			case 0:
				m.Flat++
			default:
				m.Down++
			}
		}
		if s.reward != nil {
			m.Outcomes++
			rewards[s.arm] = append(rewards[s.arm], *s.reward)
		}
	}
	nDef, nCan := int64(len(rewards[ArmDefault])), int64(len(rewards[ArmCandidate]))
	b := &a.boot
	if b.at.IsZero() || b.round != a.round || (b.nDef != nDef || b.nCan != nCan) && time.Since(b.at) >= bootEvery {
		b.at, b.round, b.nDef, b.nCan = time.Now(), a.round, nDef, nCan
		b.def = abstat.BootstrapMean(rewards[ArmDefault], c.Confidence, c.Resamples, c.Seed)
		b.cand = abstat.BootstrapMean(rewards[ArmCandidate], c.Confidence, c.Resamples, c.Seed)
		b.diff = abstat.BootstrapDiff(rewards[ArmCandidate], rewards[ArmDefault], c.Confidence, c.Resamples, c.Seed)
	}
	for i := range st.Arms {
		m := &st.Arms[i]
		if m.Turns > 0 {
			m.LatencyMean = latency[m.Role] / float64(m.Turns)
		}
		m.ThumbsUp = abstat.Wilson(m.Up, m.Rated, c.Confidence)
		m.Reward = b.def
		if m.Role == ArmCandidate {
			m.Reward = b.cand
		}
		m.Outcomes = min(m.Outcomes, map[string]int64{ArmDefault: b.nDef, ArmCandidate: b.nCan}[m.Role])
	}
	if len(st.Arms) == 2 {
		d, k := &st.Arms[0], &st.Arms[1]
		if c.Metric == MetricReward {
			st.Diff = b.diff
		} else {
			st.Diff = abstat.Newcombe(k.Up, k.Rated, d.Up, d.Rated, c.Confidence)
		}
		st.HasDiff = k.n(c.Metric) > 0 && d.n(c.Metric) > 0
		st.Losing = st.HasDiff && st.Diff.High < -c.Margin
	}
	for _, d := range a.decisions {
		switch d.Action {
		case "promote":
			st.Promotions++
		case "rollback":
			st.Rollbacks++
		}
	}
	st.Decisions = slices.Clone(a.decisions[max(0, len(a.decisions)-20):])
	a.cache.version, a.cache.st, a.cache.stale = a.version, st, b.nDef != nDef || b.nCan != nCan
	return st
}

// EvalScores returns the eval suites' primary metrics for the checkpoint at a
// step (suite → value; none yet: empty), and whether eval suites are configured.
type EvalScores func(step int64) (scores map[string]float64, configured bool)

// rule applies the promotion rule to st: the action ("" to wait), why, and the
// decision it would record.
func (a *abTest) rule(st ABStats, evals EvalScores) (string, string, Decision) {
	c := a.cfg
	if len(st.Arms) < 2 {
		return "", "no candidate in test", Decision{}
	}
	def, cand := st.Arms[0], st.Arms[1]
	d := Decision{Round: st.Round, Default: def.Checkpoint, Candidate: cand.Checkpoint, Metric: c.Metric,
		Confidence: c.Confidence, Margin: c.Margin, DefaultN: def.n(c.Metric), CandN: cand.n(c.Metric),
		DefaultEst: def.est(c.Metric), CandEst: cand.est(c.Metric), Diff: st.Diff}
	if d.DefaultN < c.MinSessions || d.CandN < c.MinSessions {
		return "", fmt.Sprintf("collecting: %d and %d sessions with %s data (default, candidate), %d each needed",
			d.DefaultN, d.CandN, c.Metric, c.MinSessions), d
	}
	diff := fmt.Sprintf("%s candidate − default %+.4f, %.0f%% interval [%+.4f, %+.4f], margin %.4f",
		c.Metric, st.Diff.Est, 100*c.Confidence, st.Diff.Low, st.Diff.High, c.Margin)
	if st.Diff.High < -c.Margin {
		return "rollback", "the candidate is worse by more than the margin: " + diff, d
	}
	if st.Diff.Low > -c.Margin {
		if evals != nil {
			cs, configured := evals(cand.Checkpoint.Step)
			ds, _ := evals(def.Checkpoint.Step)
			d.EvalsCand, d.EvalsDef = cs, ds
			if configured && len(cs) == 0 {
				return "", "not worse (" + diff + "); waiting for the candidate's evals", d
			}
			suites := make([]string, 0, len(cs))
			for s := range cs {
				suites = append(suites, s)
			}
			sort.Strings(suites)
			for _, s := range suites {
				if dv, ok := ds[s]; ok && cs[s] < dv-c.EvalMargin {
					return "rollback", fmt.Sprintf("eval regression: suite %s %.4f on the candidate, %.4f on the default (eval_margin %.4f)", s, cs[s], dv, c.EvalMargin), d
				}
			}
		}
		return "promote", "the candidate is not worse by more than the margin: " + diff, d
	}
	if c.MaxSessions > 0 && d.DefaultN >= c.MaxSessions && d.CandN >= c.MaxSessions {
		return "rollback", fmt.Sprintf("undecided at max_sessions %d: %s", c.MaxSessions, diff), d
	}
	return "", "undecided: " + diff, d
}

// ErrNoCandidate is a promote or rollback without a candidate in test.
var ErrNoCandidate = errors.New("no candidate checkpoint in test")

// decide records decision d (action promote or rollback, by, why) in the history
// and begins the next round: promote makes the candidate the default, rollback
// keeps the default; either way no candidate is in test until a newer checkpoint.
func (a *abTest) decide(action, by, why string, d Decision) (Decision, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cand == nil {
		return Decision{}, ErrNoCandidate
	}
	if d.Round != a.round || d.Candidate != *a.cand { // stale numbers: the state moved on
		return Decision{}, fmt.Errorf("A/B round %d is over", d.Round)
	}
	d.At, d.Action, d.By, d.Reason = time.Now().UTC(), action, by, why
	if err := a.hist.AppendJSON(d); err != nil {
		return Decision{}, fmt.Errorf("record A/B decision: %w", err)
	}
	a.decisions = append(a.decisions, d)
	def, floor := a.def, max(a.floor, a.cand.Step)
	if action == "promote" {
		def = a.cand
	}
	if err := a.begin(def, nil, floor); err != nil {
		return d, err
	}
	return d, nil
}

// reset begins a round with def as the default and no candidate, recording a
// "reset" decision (by start-up, with why): the default could not be loaded.
func (a *abTest) reset(def Checkpoint, why string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	d := Decision{At: time.Now().UTC(), Round: a.round, Action: "reset", By: "start-up", Reason: why, Default: def, Metric: a.cfg.Metric,
		Confidence: a.cfg.Confidence, Margin: a.cfg.Margin}
	if a.def != nil {
		d.Default = *a.def
	}
	if a.cand != nil {
		d.Candidate = *a.cand
	}
	if err := a.hist.AppendJSON(d); err != nil {
		return fmt.Errorf("record A/B reset: %w", err)
	}
	a.decisions = append(a.decisions, d)
	return a.begin(&def, nil, max(a.floor, def.Step))
}

// propose starts a round with cand as the candidate when none is in test and it is
// newer than every checkpoint decided; it reports whether it did.
func (a *abTest) propose(cand Checkpoint) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cand != nil || a.def == nil || cand.Dir == a.def.Dir || cand.Step <= a.floor || cand.Step <= a.def.Step {
		return false, nil
	}
	return true, a.begin(a.def, &cand, a.floor)
}

// newer reports whether a checkpoint of step may become a candidate: newer than
// every checkpoint decided and than the default.
func (a *abTest) newer(step int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cand == nil && a.def != nil && step > a.floor && step > a.def.Step
}

// start sets the first default when the state is new (no round yet).
func (a *abTest) start(def Checkpoint) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.def != nil {
		return nil
	}
	return a.begin(&def, nil, def.Step)
}

// finite is v, or 0 for NaN (proto and JSON numbers).
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
