package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

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

// feedback is POST /v1/feedback. It is journaled like a turn, so it is in the
// rollout when the session ends. A session already written to the spool takes no
// more feedback (404): joining late ratings to written rollouts is not done yet.
func (g *Gateway) feedback(w http.ResponseWriter, r *http.Request) {
	var req FeedbackRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil && err != io.EOF {
		writeError(w, badRequest("", "malformed JSON body: %v", err))
		return
	}
	id, turn := req.SessionID, req.Turn
	if req.CompletionID != "" {
		rest, ok := strings.CutPrefix(req.CompletionID, "chatcmpl-")
		i := strings.LastIndexByte(rest, '-')
		n, err := strconv.Atoi(rest[i+1:])
		if !ok || i <= 0 || err != nil || (id != "" && id != rest[:i]) {
			writeError(w, badRequest("", "completion_id %q is not one of this gateway's answers (chatcmpl-<session>-<turn>)", req.CompletionID))
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
	}
	notOpen := &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("no open session %q (unknown, or already written to the spool: late feedback is not supported yet)", id), Type: "invalid_request_error"}
	g.mu.Lock()
	s := g.sessions[id]
	if s == nil {
		g.mu.Unlock()
		writeError(w, notOpen)
		return
	}
	s.busy++
	g.mu.Unlock()
	defer g.release(s)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.turns == 0 {
		writeError(w, notOpen)
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
	g.log.Info().Str("session", id).Int("turn", turn).Bool("rating", req.Rating != nil).Bool("comment", req.Comment != "").Msg("feedback recorded")
	writeJSON(w, map[string]any{"session_id": id, "turn": turn, "recorded": true})
}
