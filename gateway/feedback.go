package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hindsight-ai/hindsight/rollout"
)

// feedbackBodyLimit bounds a feedback request's body (bytes).
const feedbackBodyLimit = 1 << 20

// FeedbackRequest is the body of POST /v1/feedback: a person's rating of a
// conversation and a comment on one of its replies.
type FeedbackRequest struct {
	// SessionID or CompletionID ("chatcmpl-<session>-<turn>", an answer's id) names
	// the conversation; the completion id also names the turn.
	SessionID    string `json:"session_id"`
	CompletionID string `json:"completion_id"`
	// Rating is −1, 0 or +1: the rollout's feedback column. Optional.
	Rating *int8 `json:"rating"`
	// Comment goes into the feedback of the turn's reply segment, where the
	// feedback teacher reads it as a hint. Optional.
	Comment string `json:"comment"`
	// Turn (1-based) is the reply the comment is about; default: the completion
	// id's turn, else the last.
	Turn int `json:"turn"`
}

// feedback is POST /v1/feedback. On an open session it is journaled like a turn,
// so it is in the rollout when the session ends. On a session already written to
// the spool it becomes a follow-up record (LateFeedback) that the daemon joins to
// the rollout if it comes before the rollout is taken for training; after, it is
// kept as too late and never trained.
func (g *Gateway) feedback(w http.ResponseWriter, r *http.Request) {
	var req FeedbackRequest
	if aerr := decodeBody(w, r, feedbackBodyLimit, "the feedback body limit, 1 MiB", &req, true); aerr != nil {
		writeError(w, aerr)
		return
	}
	id, turn := req.SessionID, req.Turn
	if req.CompletionID != "" {
		rest, ok := strings.CutPrefix(req.CompletionID, "chatcmpl-")
		i := strings.LastIndexByte(rest, '-')
		n, err := strconv.Atoi(rest[i+1:])
		if !ok || i <= 0 || err != nil || n < 1 {
			writeError(w, badRequest("", "completion_id %q is not one of this gateway's answers (chatcmpl-<session>-<turn>)", req.CompletionID))
			return
		}
		if id != "" && id != rest[:i] {
			writeError(w, badRequest("", "completion_id %q is an answer of session %q, not of session_id %q: give one of them, or both that agree", req.CompletionID, rest[:i], id))
			return
		}
		id = rest[:i]
		if turn == 0 {
			turn = n
		}
	}
	switch {
	case id == "":
		writeError(w, badRequest("", "feedback: give session_id or completion_id"))
		return
	case req.Rating == nil && req.Comment == "":
		writeError(w, badRequest("", "feedback: give a rating, a comment or both"))
		return
	case req.Rating != nil && (*req.Rating < -1 || *req.Rating > 1):
		writeError(w, badRequest("", "rating %d: want -1, 0 or 1", *req.Rating))
		return
	case turn < 0:
		writeError(w, badRequest("", "turn %d: want ≥ 1", turn))
		return
	case len(req.Comment) > g.cfg.MaxCommentBytes:
		writeError(w, badRequest("comment_too_long", "comment is %d bytes; gateway.max_comment_bytes is %d: shorten it (a hint is a few sentences)", len(req.Comment), g.cfg.MaxCommentBytes))
		return
	}
	g.mu.Lock()
	s := g.sessions[id]
	held := false
	if s == nil {
		s, held = g.held[id], true // closed, in its feedback window: journaled like an open session's
	}
	if s == nil {
		s, held = g.ending[id], false // being written: its lock is held until the write is done
	}
	if s == nil {
		g.mu.Unlock()
		g.lateFeedback(w, id, &req, turn)
		return
	}
	s.busy++
	g.mu.Unlock()
	defer g.release(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		g.lateFeedback(w, id, &req, turn)
		return
	}
	if s.turns == 0 {
		writeError(w, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("no session %q", id), Type: "invalid_request_error"})
		return
	}
	if turn == 0 {
		turn = s.turns
	}
	if turn < 1 || turn > len(s.replySeg) {
		writeError(w, badRequest("", "turn %d: session %s has turns 1…%d", turn, id, len(s.replySeg)))
		return
	}
	rec := &turnRecord{Turn: s.turns, Messages: s.messages, PolicyVersion: max(s.version, 0), Tokenizer: s.tok,
		Rating: req.Rating, Comment: req.Comment, CommentTurn: turn}
	if err := s.appendTurn(g.opts.JournalDir, rec); err != nil {
		g.log.Error().Err(err).Str("session", id).Msg("journal feedback")
		writeError(w, &apiError{status: http.StatusInternalServerError, Message: "record the feedback: " + err.Error(), Type: "server_error"})
		return
	}
	g.abFeedback(id, req.Rating, req.Comment != "")
	g.log.Info().Str("session", id).Int("turn", turn).Bool("rating", req.Rating != nil).Bool("comment", req.Comment != "").Msg("feedback recorded")
	ans := map[string]any{"session_id": id, "turn": turn, "recorded": true, "late": false, "too_late": false, "held": held}
	g.checkComment(ans, id, s.rollout(), s.replySeg[turn-1], req.Comment)
	writeJSON(w, ans)
}

// lateFeedback records feedback on a session no longer open as a follow-up
// record: "late" in the answer says it is one, "too_late" that its rollout was
// taken for training already (kept, counted, never trained).
func (g *Gateway) lateFeedback(w http.ResponseWriter, id string, req *FeedbackRequest, turn int) {
	n, tooLate, err := g.late.Add(id, req.Rating, req.Comment, turn)
	var bad *TurnError
	switch {
	case errors.Is(err, ErrNoSession):
		writeError(w, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("no session %q (neither open nor written by this gateway)", id), Type: "invalid_request_error"})
		return
	case errors.As(err, &bad):
		writeError(w, badRequest("", "%v", err))
		return
	case err != nil:
		g.log.Error().Err(err).Str("session", id).Msg("record late feedback")
		writeError(w, &apiError{status: http.StatusInternalServerError, Message: "record the feedback: " + err.Error(), Type: "server_error"})
		return
	}
	g.abFeedback(id, req.Rating, req.Comment != "")
	g.log.Info().Str("session", id).Int("turn", n).Bool("too_late", tooLate).Bool("rating", req.Rating != nil).
		Bool("comment", req.Comment != "").Msg("late feedback recorded")
	ans := map[string]any{"session_id": id, "turn": n, "recorded": true, "late": true, "too_late": tooLate}
	if !tooLate {
		g.checkComment(ans, id, nil, -1, req.Comment)
	}
	writeJSON(w, ans)
}

// checkComment adds to a feedback answer whether its comment can become a hint
// ("comment_usable", and "comment_problem" when not), by Options.CommentCheck on
// the rollout as it stands (r nil: the length only); an unusable one is counted
// and logged. Nothing without a comment or a check.
func (g *Gateway) checkComment(ans map[string]any, id string, r *rollout.Rollout, seg int, comment string) {
	if comment == "" || g.opts.CommentCheck == nil {
		return
	}
	problem := g.opts.CommentCheck(r, seg, comment)
	ans["comment_usable"] = problem == ""
	if problem != "" {
		ans["comment_problem"] = problem
		g.unusableComments.Add(1)
		g.log.Warn().Str("session", id).Str("problem", problem).Msg("a comment that cannot become a hint")
	}
}
