package daemon

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
	"github.com/hindsight-ai/hindsight/status/statustest"
)

// pauserControl serves ControlService from a bare pauser, as the daemon does.
type pauserControl struct{ p *pauser }

func (c pauserControl) Pause(by, reason string) *hindsightv1.PauseState { return c.p.pause(by, reason) }
func (c pauserControl) Resume(string) *hindsightv1.PauseState {
	_, st := c.p.resume()
	return st
}

func TestServerPauseResume(t *testing.T) {
	p := newPauser()
	snap := func() *hindsightv1.Status {
		st := p.proto()
		return &hindsightv1.Status{State: stateReady, Paused: st != nil, PauseReason: reasonLine(st), Pause: st}
	}
	s, base := statustest.Start(t, snap, nil)
	s.SetController(pauserControl{p})
	ctrl := hindsightv1connect.NewControlServiceClient(statustest.H2CClient(t), base, connect.WithGRPC())
	status := hindsightv1connect.NewStatusServiceClient(statustest.H2CClient(t), base)

	resp, err := ctrl.Pause(statustest.Context(t), connect.NewRequest(&hindsightv1.PauseRequest{Reason: "swap the key", By: "alice@gpu-3"}))
	require.NoError(t, err)
	require.True(t, resp.Msg.GetPause().GetOperator())
	require.Equal(t, "alice@gpu-3", resp.Msg.GetPause().GetBy())
	since := resp.Msg.GetPause().GetSince().AsTime()

	got, err := status.GetStatus(statustest.Context(t), connect.NewRequest(&hindsightv1.GetStatusRequest{}))
	require.NoError(t, err)
	st := got.Msg.GetStatus()
	require.True(t, st.GetPaused())
	require.Equal(t, "operator (alice@gpu-3): swap the key", st.GetPauseReason())
	require.Equal(t, stateReady, st.GetState(), "readiness does not change")

	// Pausing again renews who and why, not since; without by, the peer address stands in.
	resp, err = ctrl.Pause(statustest.Context(t), connect.NewRequest(&hindsightv1.PauseRequest{Reason: "still"}))
	require.NoError(t, err)
	require.Equal(t, since, resp.Msg.GetPause().GetSince().AsTime())
	require.Contains(t, resp.Msg.GetPause().GetBy(), "127.0.0.1:")

	paused, _ := p.state()
	require.True(t, paused)
	r, err := ctrl.Resume(statustest.Context(t), connect.NewRequest(&hindsightv1.ResumeRequest{By: "bob"}))
	require.NoError(t, err)
	require.Nil(t, r.Msg.GetPause())
	paused, _ = p.state()
	require.False(t, paused)

}

func TestPauserWaitAndDiskFull(t *testing.T) {
	p := newPauser()
	require.NoError(t, p.wait(t.Context()), "not paused: no wait")

	p.setDiskFull("checkpoint", "/data/checkpoints", time.Now().Add(time.Second))
	woke := make(chan error, 1)
	go func() { woke <- p.wait(t.Context()) }()
	p.pause("op", "")
	require.True(t, p.clearDiskFull())
	select {
	case <-woke:
		t.Fatal("woke while the operator's pause holds")
	case <-time.After(50 * time.Millisecond):
	}
	require.Equal(t, "operator (op)", reasonLine(p.proto()))
	p.resume()
	select {
	case err := <-woke:
		require.NoError(t, err)
	case <-time.After(statustest.Timeout):
		t.Fatal("wait did not return after resume")
	}

	p.setDiskFull("claim", "/data/spool/incoming/x.arrow", time.Now())
	require.Equal(t, "disk full: /data/spool/incoming/x.arrow", reasonLine(p.proto()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, p.wait(ctx), context.Canceled)
}
