package daemon

import (
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
		Log: d.opts.Log,
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
			HeldWrittenEarly: st.HeldEarly, CommentsUnusable: st.UnusableComments}
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
