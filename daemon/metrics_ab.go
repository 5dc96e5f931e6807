package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
)

// abCollector serves the gateway's A/B test from the published status
// (docs/gateway.md "Which checkpoint do people prefer"); nothing while it is off.
type abCollector struct{ s *stats }

var (
	abRoundDesc    = prometheus.NewDesc("hindsight_gateway_ab_round", "The A/B test's round (a new one with each candidate and after each decision).", nil, nil)
	abStepDesc     = prometheus.NewDesc("hindsight_gateway_ab_step", "Step of each arm's checkpoint (arm: default, candidate).", []string{"arm"}, nil)
	abSessionsDesc = prometheus.NewDesc("hindsight_gateway_ab_sessions", "Sessions assigned to each arm this round.", []string{"arm"}, nil)
	abTurnsDesc    = prometheus.NewDesc("hindsight_gateway_ab_turns", "Turns answered by each arm this round.", []string{"arm"}, nil)
	abLatencyDesc  = prometheus.NewDesc("hindsight_gateway_ab_latency_mean_seconds", "Mean latency of each arm's turns this round (request to answer).", []string{"arm"}, nil)
	abRatingsDesc  = prometheus.NewDesc("hindsight_gateway_ab_ratings",
		"Rated sessions of each arm this round by their latest rating (rating: up, flat, down).", []string{"arm", "rating"}, nil)
	abCommentsDesc = prometheus.NewDesc("hindsight_gateway_ab_comments", "Comments on each arm's sessions this round.", []string{"arm"}, nil)
	abThumbsDesc   = prometheus.NewDesc("hindsight_gateway_ab_thumbs_up_rate",
		"Share of each arm's rated sessions rated +1, with its Wilson interval (bound: estimate, low, high) at gateway.ab.confidence.", []string{"arm", "bound"}, nil)
	abOutcomesDesc = prometheus.NewDesc("hindsight_gateway_ab_outcomes", "Sessions of each arm closed with a reward this round.", []string{"arm"}, nil)
	abRewardDesc   = prometheus.NewDesc("hindsight_gateway_ab_reward_mean",
		"Mean reward of each arm's closed sessions, with its bootstrap interval (bound: estimate, low, high); absent without outcomes.", []string{"arm", "bound"}, nil)
	abDiffDesc = prometheus.NewDesc("hindsight_gateway_ab_diff",
		"The candidate's metric (gateway.ab.metric) minus the default's, with its interval (bound: estimate, low, high); absent until both arms have data.", []string{"metric", "bound"}, nil)
	abLosingDesc = prometheus.NewDesc("hindsight_gateway_ab_candidate_losing",
		"1 while the candidate is worse than the default by more than gateway.ab.margin at gateway.ab.confidence, else 0.", nil, nil)
	abDecisionsDesc = prometheus.NewDesc("hindsight_gateway_ab_decisions_total",
		"A/B decisions over the test's whole history (action: promote, rollback).", []string{"action"}, nil)
)

func (c abCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{abRoundDesc, abStepDesc, abSessionsDesc, abTurnsDesc, abLatencyDesc, abRatingsDesc,
		abCommentsDesc, abThumbsDesc, abOutcomesDesc, abRewardDesc, abDiffDesc, abLosingDesc, abDecisionsDesc} {
		ch <- d
	}
}

func (c abCollector) Collect(ch chan<- prometheus.Metric) {
	ab := c.s.snapshot().GetGateway().GetAb()
	if ab == nil {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	g(abRoundDesc, float64(ab.GetRound()))
	for _, a := range ab.GetArms() {
		r := a.GetRole()
		g(abStepDesc, float64(a.GetStep()), r)
		g(abSessionsDesc, float64(a.GetSessions()), r)
		g(abTurnsDesc, float64(a.GetTurns()), r)
		g(abLatencyDesc, a.GetLatencyMeanSeconds(), r)
		g(abRatingsDesc, float64(a.GetThumbsUp()), r, "up")
		g(abRatingsDesc, float64(a.GetThumbsFlat()), r, "flat")
		g(abRatingsDesc, float64(a.GetThumbsDown()), r, "down")
		g(abCommentsDesc, float64(a.GetComments()), r)
		g(abThumbsDesc, a.GetThumbsUpRate(), r, "estimate")
		g(abThumbsDesc, a.GetThumbsUpLow(), r, "low")
		g(abThumbsDesc, a.GetThumbsUpHigh(), r, "high")
		g(abOutcomesDesc, float64(a.GetOutcomes()), r)
		if a.GetOutcomes() > 0 {
			g(abRewardDesc, a.GetRewardMean(), r, "estimate")
			g(abRewardDesc, a.GetRewardLow(), r, "low")
			g(abRewardDesc, a.GetRewardHigh(), r, "high")
		}
	}
	if ab.GetHasDiff() {
		g(abDiffDesc, ab.GetDiff(), ab.GetMetric(), "estimate")
		g(abDiffDesc, ab.GetDiffLow(), ab.GetMetric(), "low")
		g(abDiffDesc, ab.GetDiffHigh(), ab.GetMetric(), "high")
	}
	losing := 0.0
	if ab.GetLosing() {
		losing = 1
	}
	g(abLosingDesc, losing)
	ch <- prometheus.MustNewConstMetric(abDecisionsDesc, prometheus.CounterValue, float64(ab.GetPromotions()), "promote")
	ch <- prometheus.MustNewConstMetric(abDecisionsDesc, prometheus.CounterValue, float64(ab.GetRollbacks()), "rollback")
}
