package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
)

// errShuttingDown ends WatchStatus streams when the daemon stops.
var errShuttingDown = connect.NewError(connect.CodeUnavailable, errors.New("hindsightd is shutting down"))

// statusService implements hindsightv1connect.StatusServiceHandler; it is separate from
// Server to keep the RPC methods out of Server's API.
type statusService struct {
	s *Server
}

var _ hindsightv1connect.StatusServiceHandler = (*statusService)(nil)

// GetStatus returns the latest snapshot.
func (h *statusService) GetStatus(_ context.Context, _ *connect.Request[hindsightv1.GetStatusRequest]) (*connect.Response[hindsightv1.GetStatusResponse], error) {
	st, err := h.s.current()
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&hindsightv1.GetStatusResponse{Status: st}), nil
}

// WatchStatus sends a snapshot now and then one per interval until the client goes away
// or the server shuts down.
func (h *statusService) WatchStatus(ctx context.Context, req *connect.Request[hindsightv1.WatchStatusRequest], stream *connect.ServerStream[hindsightv1.WatchStatusResponse]) error {
	interval, err := watchInterval(req.Msg)
	if err != nil {
		return err
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		st, err := h.s.current()
		if err != nil {
			return err
		}
		if err := stream.Send(&hindsightv1.WatchStatusResponse{Status: st}); err != nil {
			return err // the client went away; nobody is left to read an error
		}
		select {
		case <-ticker.C:
		case <-h.s.done:
			return errShuttingDown
		case <-ctx.Done():
			select {
			case <-h.s.done: // Shutdown cancels request contexts too
				return errShuttingDown
			default:
				return ctx.Err()
			}
		}
	}
}

// controlService implements hindsightv1connect.ControlServiceHandler.
type controlService struct {
	s *Server
}

var _ hindsightv1connect.ControlServiceHandler = (*controlService)(nil)

// maxPauseText bounds PauseRequest.reason and .by as shown in status.
const maxPauseText = 512

// Pause pauses the daemon through its Controller.
func (h *controlService) Pause(_ context.Context, req *connect.Request[hindsightv1.PauseRequest]) (*connect.Response[hindsightv1.PauseResponse], error) {
	c := h.s.controller()
	if c == nil {
		return nil, errNoControl
	}
	if len(req.Msg.GetReason()) > maxPauseText || len(req.Msg.GetBy()) > maxPauseText {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reason and by are limited to %d bytes", maxPauseText))
	}
	st := c.Pause(requester(req.Msg.GetBy(), req.Peer()), req.Msg.GetReason())
	return connect.NewResponse(&hindsightv1.PauseResponse{Pause: st}), nil
}

// Resume ends an operator's pause through the daemon's Controller.
func (h *controlService) Resume(_ context.Context, req *connect.Request[hindsightv1.ResumeRequest]) (*connect.Response[hindsightv1.ResumeResponse], error) {
	c := h.s.controller()
	if c == nil {
		return nil, errNoControl
	}
	if len(req.Msg.GetBy()) > maxPauseText {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("by is limited to %d bytes", maxPauseText))
	}
	st := c.Resume(requester(req.Msg.GetBy(), req.Peer()))
	return connect.NewResponse(&hindsightv1.ResumeResponse{Pause: st}), nil
}

var errNoControl = connect.NewError(connect.CodeUnimplemented, errors.New("this server cannot pause or resume a daemon"))

// requester is who made a control call: the by the client sent, else its address.
func requester(by string, peer connect.Peer) string {
	if by != "" {
		return by
	}
	return peer.Addr
}

// current returns the latest snapshot, or UNAVAILABLE if the daemon has published none.
func (s *Server) current() (*hindsightv1.Status, error) {
	st := s.snapshot()
	if st == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("hindsightd has not published a status yet"))
	}
	return st, nil
}

// watchInterval returns the period a WatchStatusRequest asks for: default 1s, at least
// 100ms; a negative or invalid duration is INVALID_ARGUMENT.
func watchInterval(req *hindsightv1.WatchStatusRequest) (time.Duration, error) {
	if req.GetInterval() == nil {
		return defaultWatchInterval, nil
	}
	if err := req.GetInterval().CheckValid(); err != nil {
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("check interval: %w", err))
	}
	d := req.GetInterval().AsDuration()
	switch {
	case d < 0:
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("interval %s is negative", d))
	case d == 0:
		return defaultWatchInterval, nil
	case d < minWatchInterval:
		return minWatchInterval, nil
	}
	return d, nil
}

// ABDecider is a Controller that can also decide the gateway's A/B test by hand
// (the daemon); ControlService.DecideAB is UNIMPLEMENTED on one that cannot.
type ABDecider interface {
	DecideAB(action, by, reason string) (*hindsightv1.ABDecision, error)
}

// DecideAB promotes or rolls back the gateway's A/B candidate through the
// daemon.
func (h *controlService) DecideAB(_ context.Context, req *connect.Request[hindsightv1.DecideABRequest]) (*connect.Response[hindsightv1.DecideABResponse], error) {
	c, ok := h.s.controller().(ABDecider)
	if !ok {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("this server cannot decide an A/B test"))
	}
	m := req.Msg
	if m.GetAction() != "promote" && m.GetAction() != "rollback" {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("action %q: want promote or rollback", m.GetAction()))
	}
	if len(m.GetReason()) > maxPauseText || len(m.GetBy()) > maxPauseText {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("reason and by are limited to %d bytes", maxPauseText))
	}
	d, err := c.DecideAB(m.GetAction(), requester(m.GetBy(), req.Peer()), m.GetReason())
	if err != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, err)
	}
	return connect.NewResponse(&hindsightv1.DecideABResponse{Decision: d}), nil
}
