package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"connectrpc.com/connect"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
)

const abUsage = `usage: hindsight ab status [-addr HOST:PORT] [-timeout D]
       hindsight ab promote [-addr HOST:PORT] [-reason TEXT] [-timeout D]
       hindsight ab rollback [-addr HOST:PORT] [-reason TEXT] [-timeout D]

The gateway's A/B test (gateway.ab; docs/gateway.md "Which checkpoint do people
prefer"). status: both checkpoints with their sessions, ratings, outcomes and
latency, the intervals, what the rule says and the decisions made. promote: the
candidate becomes the default; rollback: the default stays and the candidate is
not tried again. Either is recorded in the decision history with who decided, why,
and the rule's numbers at that moment. Exit 0 on success, 1 if the daemon cannot be
reached or refuses (no candidate in test, A/B off), 2 on a usage error. promote
and rollback send $HINDSIGHT_CONTROL_KEY, else $HINDSIGHT_STATUS_KEY; status sends
$HINDSIGHT_STATUS_KEY.

flags:
`

// abCmd is `hindsight ab status|promote|rollback`.
func abCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight ab", flag.ContinueOnError)
	fs.SetOutput(stderr)
	daemon := addDaemonFlags(fs)
	reason := fs.String("reason", "", "why, recorded with the decision (promote, rollback)")
	fs.Usage = func() {
		fmt.Fprint(stderr, abUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	action := fs.Arg(0)
	switch {
	case fs.NArg() != 1 || (action != "status" && action != "promote" && action != "rollback"):
		return cliflag.Fail(fs, stderr, "want one of status, promote, rollback, got %q", strings.Join(fs.Args(), " "))
	case action == "status" && *reason != "":
		return cliflag.Fail(fs, stderr, "-reason is for promote and rollback")
	case *daemon.timeout <= 0:
		return cliflag.Fail(fs, stderr, "-timeout must be positive, got %s", *daemon.timeout)
	}
	baseURL, err := statusBaseURL(*daemon.addr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, *daemon.timeout)
	defer cancel()
	if action == "status" {
		httpClient, err := daemon.client("HINDSIGHT_STATUS_KEY")
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
			return 2
		}
		resp, err := hindsightv1connect.NewStatusServiceClient(httpClient, baseURL).GetStatus(ctx, connect.NewRequest(&hindsightv1.GetStatusRequest{}))
		if err != nil {
			fmt.Fprintf(stderr, "%s: %s: %v\n", fs.Name(), *daemon.addr, err)
			return 1
		}
		ab := resp.Msg.GetStatus().GetGateway().GetAb()
		if ab == nil {
			fmt.Fprintf(stderr, "%s: %s: A/B serving is off (gateway.ab.enabled, gateway.enabled)\n", fs.Name(), *daemon.addr)
			return 1
		}
		printAB(stdout, ab)
		return 0
	}
	httpClient, err := daemon.client("HINDSIGHT_CONTROL_KEY", "HINDSIGHT_STATUS_KEY")
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return 2
	}
	resp, err := hindsightv1connect.NewControlServiceClient(httpClient, baseURL).DecideAB(ctx,
		connect.NewRequest(&hindsightv1.DecideABRequest{Action: action, By: whoAmI(), Reason: *reason}))
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s: %v\n", fs.Name(), *daemon.addr, err)
		return 1
	}
	fmt.Fprintln(stdout, decisionLine(resp.Msg.GetDecision()))
	return 0
}

// printAB writes the A/B test: the arms, the difference, the verdict, the decisions.
func printAB(w io.Writer, ab *hindsightv1.ABTest) {
	auto := "the rule decides"
	if !ab.GetAuto() {
		auto = "decided by hand only"
	}
	fmt.Fprintf(w, "A/B round %d since %s: candidate share %.0f%%, seed %d, metric %s, margin %g at %g%% confidence, %s\n",
		ab.GetRound(), formatTime(ab.GetSince()), 100*ab.GetShare(), ab.GetSeed(), ab.GetMetric(), ab.GetMargin(), 100*ab.GetConfidence(), auto)
	for _, a := range ab.GetArms() {
		fmt.Fprintf(w, "  %-9s  step %d (%s)", a.GetRole(), a.GetStep(), a.GetCheckpoint())
		if a.GetModel() != "" {
			fmt.Fprintf(w, " as model %q", a.GetModel())
		}
		fmt.Fprintf(w, "\n    sessions %d, turns %d, mean latency %.3f s\n", a.GetSessions(), a.GetTurns(), a.GetLatencyMeanSeconds())
		fmt.Fprintf(w, "    rated %d: %d up, %d flat, %d down; thumbs-up %.3f [%.3f, %.3f]; %d comments\n", a.GetRated(), a.GetThumbsUp(),
			a.GetThumbsFlat(), a.GetThumbsDown(), a.GetThumbsUpRate(), a.GetThumbsUpLow(), a.GetThumbsUpHigh(), a.GetComments())
		if a.GetOutcomes() > 0 {
			fmt.Fprintf(w, "    outcomes %d: mean reward %.3f [%.3f, %.3f]\n", a.GetOutcomes(), a.GetRewardMean(), a.GetRewardLow(), a.GetRewardHigh())
		} else {
			fmt.Fprintf(w, "    outcomes 0\n")
		}
	}
	if ab.GetHasDiff() {
		fmt.Fprintf(w, "  difference %s candidate − default %+.4f [%+.4f, %+.4f]\n", ab.GetMetric(), ab.GetDiff(), ab.GetDiffLow(), ab.GetDiffHigh())
	}
	fmt.Fprintf(w, "  verdict    %s\n", ab.GetVerdict())
	if ab.GetLosing() {
		fmt.Fprintf(w, "  LOSING     the candidate is worse than the default by more than the margin\n")
	}
	fmt.Fprintf(w, "  decisions  %d promoted, %d rolled back\n", ab.GetPromotions(), ab.GetRollbacks())
	for _, d := range ab.GetDecisions() {
		fmt.Fprintf(w, "    %s\n", decisionLine(d))
	}
}

// decisionLine is one decision in one line, with its numbers.
func decisionLine(d *hindsightv1.ABDecision) string {
	return fmt.Sprintf("%s %s by %s (round %d, default step %d, candidate step %d): %s; %s n %d vs %d, %.4f vs %.4f, diff %+.4f [%+.4f, %+.4f]",
		formatTime(d.GetAt()), d.GetAction(), d.GetBy(), d.GetRound(), d.GetDefaultStep(), d.GetCandidateStep(), d.GetReason(),
		d.GetMetric(), d.GetDefaultN(), d.GetCandidateN(), d.GetDefaultEst(), d.GetCandidateEst(), d.GetDiff(), d.GetDiffLow(), d.GetDiffHigh())
}
