package daemon

import (
	"context"
	"errors"
	"math"
	"path/filepath"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/rollout"
)

// openGateway opens and binds the chat completions gateway when gateway.enabled:
// it serves the model directory until a checkpoint exists, then the newest one,
// and writes finished sessions into the spool's incoming/.
func (d *daemon) openGateway() error {
	if !d.cfg.Gateway.Enabled {
		return nil
	}
	dir, _ := d.cfg.ModelDir()
	g, err := gateway.New(gateway.Options{
		Config:      d.cfg.Gateway,
		ModelDir:    dir,
		Precision:   d.cfg.Model.Precision,
		Checkpoints: d.cfg.CheckpointDir(),
		JournalDir:  filepath.Join(d.cfg.DataDir, "state", "gateway"),
		Incoming:    filepath.Join(d.cfg.SpoolDir(), "incoming"),
		Backend:     d.backendChoice().Spec,
		Late:        d.late,
		CommentCheck: func(r *rollout.Rollout, seg int, comment string) string {
			if h := d.hinter.Load(); h != nil { // with training: the teacher that will read it
				return h.CommentProblem(r, seg, comment)
			}
			return ""
		},
		Evals: func(step int64) (map[string]float64, bool) {
			if ev := d.eval; ev != nil {
				return ev.rec.Scores(step), true
			}
			return nil, false
		},
		LoadModel: d.loadModel,
		Log:       d.opts.Log,
	})
	if err != nil {
		return err
	}
	if err := g.Listen(); err != nil {
		return err
	}
	d.gateway = g
	return nil
}

// gatewayStats returns the gateway's counters (nil without the gateway) and the
// engine hooks' states, for status.
func (d *daemon) gatewayStats() (*hindsightv1.GatewayStats, []*hindsightv1.EngineHookState) {
	var gs *hindsightv1.GatewayStats
	if d.gateway != nil {
		st := d.gateway.Stats()
		gs = &hindsightv1.GatewayStats{ListenAddr: st.Listen, Model: st.Model, PolicyStep: st.PolicyStep,
			Requests: st.Requests, Errors: st.Errors, Turns: st.Turns, OpenSessions: st.OpenSessions,
			RolloutsRecorded: st.RolloutsRecorded, FeedbackJoined: st.Feedback.Joined, FeedbackLate: st.Feedback.Late,
			FeedbackPending: st.Feedback.Pending, HeldSessions: st.HeldSessions, HeldBytes: st.HeldBytes,
			HeldWrittenEarly: st.HeldEarly, CommentsUnusable: st.UnusableComments, Ab: abProto(st.AB)}
	}
	var hs []*hindsightv1.EngineHookState
	if d.hooks != nil {
		for _, h := range d.hooks.States() {
			p := &hindsightv1.EngineHookState{Kind: h.Kind, Url: h.URL, LastCheckpoint: h.LastCheckpoint, LastStep: h.LastStep,
				Attempts: int64(h.Attempts), LastError: h.LastError, Pushing: h.Pushing}
			if !h.LastPushedAt.IsZero() {
				p.LastPushedAt = timestamppb.New(h.LastPushedAt)
			}
			if !h.LastErrorAt.IsZero() {
				p.LastErrorAt = timestamppb.New(h.LastErrorAt)
			}
			hs = append(hs, p)
		}
	}
	return gs, hs
}

// abProto converts the gateway's A/B statistics for status (nil: A/B off).
func abProto(st *gateway.ABStats) *hindsightv1.ABTest {
	if st == nil {
		return nil
	}
	f := func(v float64) float64 { // NaN (no data) is 0 in status
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0
		}
		return v
	}
	p := &hindsightv1.ABTest{Round: st.Round, Share: st.Share, Seed: st.Seed, Metric: st.Metric, Margin: st.Margin,
		Confidence: st.Confidence, Auto: st.Auto, HasDiff: st.HasDiff, Diff: f(st.Diff.Est), DiffLow: f(st.Diff.Low),
		DiffHigh: f(st.Diff.High), Verdict: st.Verdict, Losing: st.Losing, Promotions: st.Promotions, Rollbacks: st.Rollbacks}
	if !st.Since.IsZero() {
		p.Since = timestamppb.New(st.Since)
	}
	for _, a := range st.Arms {
		p.Arms = append(p.Arms, &hindsightv1.ABArm{Role: a.Role, Checkpoint: a.Checkpoint.Dir, Step: a.Checkpoint.Step, Model: a.Model,
			Sessions: a.Sessions, Turns: a.Turns, LatencyMeanSeconds: a.LatencyMean, Rated: a.Rated, ThumbsUp: a.Up,
			ThumbsFlat: a.Flat, ThumbsDown: a.Down, Comments: a.Comments, ThumbsUpRate: f(a.ThumbsUp.Est),
			ThumbsUpLow: f(a.ThumbsUp.Low), ThumbsUpHigh: f(a.ThumbsUp.High), Outcomes: a.Outcomes,
			RewardMean: f(a.Reward.Est), RewardLow: f(a.Reward.Low), RewardHigh: f(a.Reward.High)})
	}
	for _, d := range st.Decisions {
		p.Decisions = append(p.Decisions, decisionProto(d))
	}
	return p
}

// decisionProto converts one A/B decision.
func decisionProto(d gateway.Decision) *hindsightv1.ABDecision {
	f := func(v float64) float64 {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return 0
		}
		return v
	}
	return &hindsightv1.ABDecision{At: timestamppb.New(d.At), Round: d.Round, Action: d.Action, By: d.By, Reason: d.Reason,
		DefaultCheckpoint: d.Default.Dir, DefaultStep: d.Default.Step, CandidateCheckpoint: d.Candidate.Dir,
		CandidateStep: d.Candidate.Step, Metric: d.Metric, Confidence: d.Confidence, Margin: d.Margin,
		DefaultN: d.DefaultN, CandidateN: d.CandN, DefaultEst: f(d.DefaultEst), CandidateEst: f(d.CandEst),
		Diff: f(d.Diff.Est), DiffLow: f(d.Diff.Low), DiffHigh: f(d.Diff.High)}
}

// DecideAB is ControlService.DecideAB: the gateway's A/B candidate promoted or
// rolled back by hand.
func (d *daemon) DecideAB(action, by, reason string) (*hindsightv1.ABDecision, error) {
	if d.gateway == nil {
		return nil, errors.New("the gateway is off (gateway.enabled)")
	}
	dec, err := d.gateway.DecideAB(action, by, reason)
	if err != nil {
		return nil, err
	}
	d.stats.publish()
	return decisionProto(dec), nil
}

// loadModel has every engine hook's engine load the checkpoint at dir (of step)
// under the model id model: the gateway's A/B test on an upstream engine (each
// vllm_lora hook loads it as the adapter named model; the hooks' states in
// status show it).
func (d *daemon) loadModel(ctx context.Context, dir string, step int64, model string) error {
	if !d.cfg.abOnEngine() || d.hooks == nil {
		return nil
	}
	return d.hooks.Push(ctx, dir, step, model)
}
