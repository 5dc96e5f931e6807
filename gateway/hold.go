package gateway

import (
	"slices"
	"time"
)

// The feedback window (docs/gateway.md "Feedback window"): a closed session is
// not written to the spool at once. It stays journaled, in Gateway.held, for
// gateway.feedback_window, so a rating or comment a person posts after reading the
// last answer is journaled with it like one on an open session and is in the
// rollout that trains. endIdle writes it when the window is over; shutdown writes
// it as it is; a restart holds it for the rest of its window (its journal's
// closed_at). The held journals' bytes are bounded: beyond
// gateway.feedback_window_max_bytes the oldest are written at once.

// markClosed journals that s closed at now (with the close body's task id and
// reward), so a restart holds it for the rest of its window. A failed append is
// logged: s stays held in memory and is written when its window ends; after a
// crash it reopens as an open session, its turns all there.
func (g *Gateway) markClosed(s *session, now time.Time, taskID string, reward *float32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := now.UTC()
	rec := &turnRecord{Turn: s.turns, Messages: s.messages, TaskID: taskID, Reward: reward,
		PolicyVersion: max(s.version, 0), Tokenizer: s.tok, ClosedAt: &at}
	if err := s.appendTurn(g.opts.JournalDir, rec); err != nil {
		g.log.Error().Err(err).Str("session", s.id).Msg("journal that the session closed; it is held in memory")
	}
}

// heldBytesLocked is the bytes of the held sessions' journals (g.mu held).
func (g *Gateway) heldBytesLocked() int64 {
	var n int64
	for _, s := range g.held {
		n += s.size.Load()
	}
	return n
}

// trimHeld writes the oldest held sessions to the spool, before their window is
// over, while the held journals take more than gateway.feedback_window_max_bytes.
func (g *Gateway) trimHeld() {
	g.mu.Lock()
	total := g.heldBytesLocked()
	var early []*session
	if total > g.cfg.FeedbackWindowMaxBytes {
		byAge := make([]*session, 0, len(g.held))
		for _, s := range g.held {
			if s.busy == 0 {
				byAge = append(byAge, s)
			}
		}
		slices.SortFunc(byAge, func(a, b *session) int { return a.closedAt.Compare(b.closedAt) })
		for _, s := range byAge {
			if total <= g.cfg.FeedbackWindowMaxBytes {
				break
			}
			total -= s.size.Load()
			delete(g.held, s.id)
			g.ending[s.id] = s
			early = append(early, s)
		}
	}
	g.mu.Unlock()
	for _, s := range early {
		g.heldEarly.Add(1)
		g.log.Warn().Str("session", s.id).Int64("max_bytes", g.cfg.FeedbackWindowMaxBytes).
			Msg("held sessions over gateway.feedback_window_max_bytes: written before its feedback window is over")
		if _, err := g.end(s, "feedback window full"); err != nil {
			g.log.Error().Err(err).Str("session", s.id).Msg("write session to the spool; its journal stays for the next start")
		}
	}
}

// windowEnd is when a held session's window is over.
func (g *Gateway) windowEnd(s *session) time.Time { return s.closedAt.Add(g.cfg.FeedbackWindow) }
