package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// armKey names a loaded policy: a checkpoint and, with gateway.upstream, the
// model id its requests name.
type armKey struct {
	dir, model string
}

// get returns the policy of checkpoint ck (served under upstream model id
// ck.Model; "" for the embedded sampler), loading it the first time.
func (p *policies) get(ck Checkpoint) (*policy, error) {
	model := ck.Model
	key := armKey{ck.Dir, model}
	p.mu.Lock()
	np := p.loaded[key]
	p.mu.Unlock()
	if np != nil {
		return np, nil
	}
	var err error
	if p.up != nil {
		up := *p.up
		up.model = model
		np, err = p.openUpstream(ck.Dir, ck.Step, &up)
	} else {
		np, err = p.open(ck.Dir, ck.Step)
	}
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if had := p.loaded[key]; had != nil { // loaded meanwhile by another request
		return had, nil
	}
	if p.loaded == nil {
		p.loaded = map[armKey]*policy{}
	}
	p.loaded[key] = np
	p.log.Info().Str("model", ck.Dir).Int64("policy_version", ck.Step).Str("upstream_model", model).Msg("A/B: checkpoint loaded")
	return np, nil
}

// keep drops the loaded policies whose key is not in use.
func (p *policies) keep(use map[armKey]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.loaded {
		if !use[k] {
			delete(p.loaded, k)
			p.log.Info().Str("model", k.dir).Str("upstream_model", k.model).Msg("A/B: checkpoint unloaded (no arm, no open session)")
		}
	}
}

// checkpointFor is a servable checkpoint as the A/B test names it: with
// gateway.upstream, the default the test begins with is upstream_model, and a
// candidate is <candidate_prefix>-step-<N>.
func (g *Gateway) checkpointFor(dir string, step int64, candidate bool) Checkpoint {
	ck := Checkpoint{Dir: dir, Step: step}
	if g.cfg.Upstream != "" {
		ck.Model = g.cfg.UpstreamModel
		if candidate {
			ck.Model = g.cfg.AB.candidateModel(g.cfg.UpstreamModel, step)
		}
	}
	return ck
}

// policyFor returns the policy a recorded session samples from: without A/B the
// serving one; with A/B its arm's checkpoint, chosen on its first turn and kept
// for its life (s is locked by the caller).
func (g *Gateway) policyFor(s *session) (*policy, *apiError) {
	if g.ab == nil {
		return g.pol.cur.Load(), nil
	}
	if s.arm == "" {
		round, arm, ck := g.ab.choose(s.id)
		g.mu.Lock() // unloadUnused reads the arms of the sessions under g.mu
		s.round, s.arm, s.ck, s.model = round, arm, ck, ck.Model
		g.mu.Unlock()
	}
	ck := s.ck
	ck.Model = s.model
	p, err := g.pol.get(ck)
	if err != nil {
		g.log.Error().Err(err).Str("session", s.id).Str("checkpoint", s.ck.Dir).Msg("A/B: load the session's checkpoint")
		return nil, &apiError{status: http.StatusServiceUnavailable, Type: "server_error",
			Message: fmt.Sprintf("session %s is served by checkpoint %s (A/B arm %s), which cannot be loaded: %v", s.id, s.ck.Dir, s.arm, err)}
	}
	return p, nil
}

// abRefresh is the A/B test's reload: the first default is what would serve
// without A/B; the default's policy serves the unrecorded model and
// /v1/models; a new checkpoint newer than every one decided becomes the
// candidate when none is in test; the rule decides (gateway.ab.auto); the
// policies nobody uses are unloaded.
func (g *Gateway) abRefresh() error {
	g.abMu.Lock()
	defer g.abMu.Unlock()
	return g.abRefreshLocked()
}

// abRefreshLocked is abRefresh with g.abMu held.
func (g *Gateway) abRefreshLocked() error {
	if _, def, _ := g.ab.arms(); def == nil {
		dir, step, ok := g.pol.newest()
		if !ok {
			return errors.New("A/B: no checkpoint to serve")
		}
		if err := g.ab.start(g.checkpointFor(dir, step, false)); err != nil {
			return err
		}
	}
	_, def, cand := g.ab.arms()
	p, err := g.pol.get(*def)
	if err != nil && g.pol.cur.Load() == nil {
		// At start-up: the default is gone (pruned by train.checkpoint.keep, or
		// moved). The newest checkpoint serves instead, recorded as a reset.
		dir, step, ok := g.pol.newest()
		if !ok || dir == def.Dir {
			return fmt.Errorf("A/B: load the default checkpoint: %w", err)
		}
		why := fmt.Sprintf("the default checkpoint %s cannot be loaded (%v); the newest checkpoint serves instead", def.Dir, err)
		g.log.Error().Str("checkpoint", def.Dir).Str("instead", dir).Err(err).Msg("A/B: the default checkpoint cannot be loaded; reset to the newest")
		if err := g.ab.reset(g.checkpointFor(dir, step, false), why); err != nil {
			return err
		}
		_, def, cand = g.ab.arms()
		p, err = g.pol.get(*def)
	}
	if err != nil {
		return fmt.Errorf("A/B: load the default checkpoint: %w", err)
	}
	if cur := g.pol.cur.Load(); cur != p {
		g.pol.cur.Store(p)
		g.log.Info().Str("model", def.Dir).Int64("policy_version", def.Step).Str("chat_template", p.template.source).Msg("serving policy (A/B default)")
	}
	if cand != nil { // after a restart: loaded before its first session asks
		if _, err := g.pol.get(*cand); err != nil {
			g.log.Warn().Err(err).Str("checkpoint", cand.Dir).Msg("A/B: load the candidate")
		}
	} else {
		if dir, step, ok := g.pol.newest(); ok && dir != def.Dir && g.ab.newer(step) && g.loadWait(dir) {
			ck := g.checkpointFor(dir, step, true)
			if _, err := g.pol.get(ck); err != nil {
				g.loadFailed = map[string]time.Time{dir: time.Now()}
				g.log.Warn().Err(err).Str("checkpoint", dir).Msg("A/B: load the new checkpoint; not a candidate yet, retried in 30s")
			} else if err := g.loadOnEngine(ck); err != nil {
				g.loadFailed = map[string]time.Time{dir: time.Now()}
				g.log.Warn().Err(err).Str("checkpoint", dir).Str("upstream_model", ck.Model).Msg("A/B: the engine did not load the new checkpoint; not a candidate yet, retried in 30s")
			} else if ok, err := g.ab.propose(ck); err != nil {
				return err
			} else if ok {
				round, _, _ := g.ab.arms()
				g.log.Info().Int64("round", round).Str("candidate", dir).Int64("candidate_step", step).Str("default", def.Dir).
					Int64("default_step", def.Step).Float64("share", g.cfg.AB.Share).Msg("A/B: candidate in test")
			}
		}
	}
	if g.cfg.AB.Auto {
		st := g.ab.stats()
		if action, why, d := g.ab.rule(st, g.opts.Evals); action != "" {
			if _, err := g.decide(action, "rule", why, d); err != nil {
				return err
			}
			return g.abRefreshLocked() // the new default serves now (one more round: no candidate has sessions yet)
		}
	}
	g.unloadUnused()
	return nil
}

// decide records a decision, logs it with its numbers and reloads the arms.
func (g *Gateway) decide(action, by, why string, d Decision) (Decision, error) {
	d, err := g.ab.decide(action, by, why, d)
	if err != nil {
		return d, err
	}
	g.log.Info().Int64("round", d.Round).Str("action", d.Action).Str("by", d.By).Str("reason", d.Reason).
		Str("default", d.Default.Dir).Int64("default_step", d.Default.Step).Str("candidate", d.Candidate.Dir).
		Int64("candidate_step", d.Candidate.Step).Str("metric", d.Metric).Int64("default_n", d.DefaultN).
		Int64("candidate_n", d.CandN).Float64("default_est", finite(d.DefaultEst)).Float64("candidate_est", finite(d.CandEst)).
		Float64("diff", finite(d.Diff.Est)).Float64("diff_low", finite(d.Diff.Low)).Float64("diff_high", finite(d.Diff.High)).
		Float64("margin", d.Margin).Float64("confidence", d.Confidence).Msg("A/B decision")
	return d, nil
}

// DecideAB promotes (action "promote") or rolls back ("rollback") the candidate
// by hand: by is who decided, why their reason; the numbers recorded are the
// rule's now. ErrNoCandidate without a candidate in test; an error without A/B.
func (g *Gateway) DecideAB(action, by, why string) (Decision, error) {
	if g.ab == nil {
		return Decision{}, errors.New("A/B serving is off (gateway.ab.enabled)")
	}
	if action != "promote" && action != "rollback" {
		return Decision{}, fmt.Errorf("action %q: want promote or rollback", action)
	}
	g.abMu.Lock()
	defer g.abMu.Unlock()
	_, _, d := g.ab.rule(g.ab.stats(), g.opts.Evals)
	if d.Candidate.Dir == "" {
		return Decision{}, ErrNoCandidate
	}
	if why == "" {
		why = "by hand"
	}
	d, err := g.decide(action, by, why, d)
	if err != nil {
		return d, err
	}
	if err := g.abRefreshLocked(); err != nil {
		g.log.Warn().Err(err).Msg("A/B: reload after the decision")
	}
	return d, nil
}

// unloadUnused drops the policies of checkpoints that neither arm nor any
// unfinished session uses.
func (g *Gateway) unloadUnused() {
	_, def, cand := g.ab.arms()
	use := map[armKey]bool{{def.Dir, def.Model}: true}
	if cand != nil {
		use[armKey{cand.Dir, cand.Model}] = true
	}
	g.mu.Lock()
	for _, m := range []map[string]*session{g.sessions, g.held, g.ending} {
		for _, s := range m {
			if s.arm != "" {
				use[armKey{s.ck.Dir, s.model}] = true
			}
		}
	}
	g.mu.Unlock()
	g.pol.keep(use)
}

// ABStats returns the A/B test's statistics with the arms' model ids; ok is
// false without A/B.
func (g *Gateway) ABStats() (ABStats, bool) {
	if g.ab == nil {
		return ABStats{}, false
	}
	st := g.ab.stats()
	for i := range st.Arms {
		st.Arms[i].Model = st.Arms[i].Checkpoint.Model
	}
	_, why, _ := g.ab.rule(st, g.opts.Evals)
	st.Verdict = why
	return st, true
}

// abReopened counts a session reopened from its journal in its arm.
func (g *Gateway) abReopened(s *session) {
	if g.ab != nil && s.arm != "" {
		g.ab.reopened(s.id, s.round, s.arm, s.turns, s.latency)
	}
}

// abTurn stamps a recorded turn with the session's arm and its latency.
func (g *Gateway) abTurn(s *session, rec *turnRecord, seconds float64) {
	if g.ab == nil || s.arm == "" {
		return
	}
	rec.ABRound, rec.Arm, rec.Checkpoint, rec.Model, rec.Latency = s.round, s.arm, s.ck.Dir, s.model, seconds
}

// abAnswered counts a journaled turn in its arm (the session's first turn
// records its assignment first).
func (g *Gateway) abAnswered(s *session, seconds float64) {
	if g.ab == nil || s.arm == "" {
		return
	}
	if err := g.ab.assigned(s.id, s.round, s.arm); err != nil {
		g.log.Warn().Err(err).Str("session", s.id).Msg("A/B: record the assignment; a restart recovers it from the session's journal")
	}
	g.ab.turn(s.id, seconds)
}

// abFeedback counts a rating or comment in the session's arm.
func (g *Gateway) abFeedback(id string, rating *int8, comment bool) {
	if g.ab == nil {
		return
	}
	if err := g.ab.feedback(id, rating, comment); err != nil {
		g.log.Warn().Err(err).Str("session", id).Msg("A/B: record the feedback; not counted")
	}
}

// abOutcome counts a close's reward in the session's arm.
func (g *Gateway) abOutcome(id string, reward *float32) {
	if g.ab == nil || reward == nil {
		return
	}
	if err := g.ab.outcome(id, *reward); err != nil {
		g.log.Warn().Err(err).Str("session", id).Msg("A/B: record the outcome; not counted")
	}
}

// loadWait reports whether a checkpoint whose engine load failed may be tried
// again (30 s after the failure).
func (g *Gateway) loadWait(dir string) bool {
	at, failed := g.loadFailed[dir]
	return !failed || time.Since(at) >= 30*time.Second
}

// loadOnEngine has the engine load a candidate under its model id before any
// session names it (Options.LoadModel, the daemon's vllm_lora engine hooks);
// nothing without an engine or a loader.
func (g *Gateway) loadOnEngine(ck Checkpoint) error {
	if g.cfg.Upstream == "" || g.opts.LoadModel == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := g.opts.LoadModel(ctx, ck.Dir, ck.Step, ck.Model); err != nil {
		return err
	}
	g.log.Info().Str("checkpoint", ck.Dir).Int64("step", ck.Step).Str("upstream_model", ck.Model).Msg("A/B: the engine loaded the candidate")
	return nil
}
