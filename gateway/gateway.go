package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/internal/apikey"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// Options say where the gateway reads its policy and writes its rollouts.
type Options struct {
	Config Config
	// ModelDir is the initial policy (an HF model directory), served until a
	// checkpoint exists under Checkpoints.
	ModelDir string
	// Checkpoints is the checkpoint root whose `latest` link is followed; empty:
	// serve ModelDir only.
	Checkpoints string
	// JournalDir holds the open sessions' journals (<data_dir>/state/gateway).
	JournalDir string
	// Incoming is the spool's incoming/ folder, where finished sessions go.
	Incoming string
	// Backend is the compute backend spec (xla.ResolveBackend's result).
	Backend string
	// Late holds feedback on sessions already written, shared with the daemon,
	// which joins it to the rollouts; nil: the gateway opens its own in
	// <JournalDir>/../feedback.
	Late *LateFeedback
	// CommentCheck, when set, says why a comment on segment seg of r (nil: a
	// written session, check the length only) would give no hint, "" when it
	// would; the feedback API answers with it (the daemon's teacher settings).
	CommentCheck func(r *rollout.Rollout, seg int, comment string) string
	// Precision is the policy's compute precision (xla.Precision; "" is f32).
	Precision xla.Precision
	// Evals, when set, gives the eval suites' primary metrics of a checkpoint's
	// step, for the A/B rule's "no eval regression" (the daemon's evals.jsonl).
	Evals EvalScores
	// LoadModel, with gateway.ab and gateway.upstream, has the engine load the
	// checkpoint at dir under model id model (the daemon's vllm_lora engine
	// hooks); each candidate is loaded before it serves a session.
	LoadModel func(ctx context.Context, dir string, step int64, model string) error
	Log       zerolog.Logger
}

// Gateway serves chat completions and records the conversations.
type Gateway struct {
	cfg  Config
	opts Options
	log  zerolog.Logger
	pol  *policies
	keys *apikey.Keys

	late *LateFeedback
	ab   *abTest // gateway.ab: the A/B test (nil: off)
	// abMu orders the A/B refreshes and decisions (the Run goroutine's reload,
	// ControlService.DecideAB).
	abMu sync.Mutex
	// loadFailed holds the checkpoint whose engine load failed last, and when
	// (the Run goroutine's; abRefresh).
	loadFailed map[string]time.Time

	mu       sync.Mutex
	sessions map[string]*session
	ending   map[string]*session // out of sessions, being written to the spool
	held     map[string]*session // closed, waiting out the feedback window (hold.go)
	srv      *http.Server
	ln       net.Listener
	pending  atomic.Int64 // chat requests in the gateway (Config.MaxPending)

	// Counters since start (Stats).
	requests, errors, turns, recorded atomic.Int64
	heldEarly, unusableComments       atomic.Int64
	tls                               *tls.Config // nil: plain HTTP
}

// New opens the policy, the API keys and the open sessions' journals (sessions a
// crash or a restart left open continue, and end like any other).
func New(opts Options) (*Gateway, error) {
	g := &Gateway{cfg: opts.Config, opts: opts, log: opts.Log.With().Str("component", "gateway").Logger(),
		sessions: map[string]*session{}, ending: map[string]*session{}, held: map[string]*session{}, late: opts.Late}
	if err := g.cfg.Validate(); err != nil {
		return nil, err
	}
	var err error
	if g.keys, err = apikey.Load(g.cfg.KeysFile, "gateway.keys_file"); err != nil {
		return nil, err
	}
	for _, d := range []string{opts.JournalDir, opts.Incoming} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("open gateway: %w", err)
		}
	}
	if g.late == nil {
		if g.late, err = OpenLateFeedback(filepath.Join(filepath.Dir(opts.JournalDir), "feedback")); err != nil {
			return nil, err
		}
	}
	backend, err := xla.NewBackend(opts.Backend)
	if err != nil {
		return nil, fmt.Errorf("open gateway: backend: %w", err)
	}
	if err := opts.Precision.CheckBackend(backend); err != nil {
		return nil, fmt.Errorf("open gateway: model.%w", err)
	}
	g.pol = &policies{backend: backend, precision: opts.Precision, initial: opts.ModelDir, root: opts.Checkpoints, batch: g.cfg.MaxBatch, context: g.cfg.MaxContextTokens, log: g.log}
	if g.cfg.Upstream != "" {
		g.pol.up = &upstream{base: g.cfg.Upstream, model: g.cfg.UpstreamModel, keyEnv: g.cfg.UpstreamAPIKeyEnv,
			client: &http.Client{Timeout: g.cfg.UpstreamTimeout}}
	}
	if g.cfg.AB.Enabled {
		if g.ab, err = openAB(filepath.Join(filepath.Dir(opts.JournalDir), "ab"), g.cfg.AB); err != nil {
			return nil, fmt.Errorf("open gateway: %w", err)
		}
		if err := g.abRefresh(); err != nil {
			g.ab.close()
			return nil, fmt.Errorf("open gateway: %w", err)
		}
	} else if err := g.pol.refresh(); err != nil {
		return nil, fmt.Errorf("open gateway: %w", err)
	}
	if g.cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(g.cfg.TLSCertFile, g.cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("load gateway.tls_cert_file / tls_key_file: %w", err)
		}
		g.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if err := g.recover(); err != nil {
		return nil, err
	}
	return g, nil
}

// recover reopens every session journal in JournalDir.
func (g *Gateway) recover() error {
	paths, err := filepath.Glob(filepath.Join(g.opts.JournalDir, "*.jsonl"))
	if err != nil {
		return fmt.Errorf("recover sessions: %w", err)
	}
	for _, path := range paths {
		id := strings.TrimSuffix(filepath.Base(path), ".jsonl")
		s, err := readJournal(path, id)
		if err != nil {
			return fmt.Errorf("recover session %s: %w", id, err)
		}
		if s == nil { // nothing acknowledged
			os.Remove(path)
			continue
		}
		s.used = time.Now()
		if !s.closedAt.IsZero() { // closed: the rest of its feedback window
			g.held[id] = s
			g.abReopened(s)
			g.log.Info().Str("session", id).Int("turns", s.turns).Time("closed_at", s.closedAt).Msg("closed session reopened from its journal; held for feedback")
			continue
		}
		g.sessions[id] = s
		g.abReopened(s)
		g.log.Info().Str("session", id).Int("turns", s.turns).Int("tokens", len(s.tokens)).Msg("session reopened from its journal")
	}
	return nil
}

// Listen binds the gateway's address; Addr then says where it is.
func (g *Gateway) Listen() error {
	ln, err := net.Listen("tcp", g.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen gateway: %w", err)
	}
	g.ln = ln
	return nil
}

// Addr is the bound address.
func (g *Gateway) Addr() string { return g.ln.Addr().String() }

// Run serves until ctx ends, then stops taking requests, lets those in flight
// finish, and writes every open session to the spool.
func (g *Gateway) Run(ctx context.Context) error {
	if g.ln == nil {
		if err := g.Listen(); err != nil {
			return err
		}
	}
	g.srv = &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, TLSConfig: g.tls}
	errc := make(chan error, 1)
	go func() {
		if g.tls != nil {
			errc <- g.srv.ServeTLS(g.ln, "", "")
		} else {
			errc <- g.srv.Serve(g.ln)
		}
	}()
	g.log.Info().Str("listen", g.Addr()).Str("model", g.cfg.ModelName).Bool("auth", g.keys != nil).Bool("tls", g.tls != nil).Str("backend", g.opts.Backend).Msg("gateway serving")
	tick := time.NewTicker(min(max(g.cfg.IdleTimeout/10, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	reload := time.NewTicker(g.cfg.ReloadInterval)
	defer reload.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err = <-errc:
			break loop
		case <-tick.C:
			g.endIdle(time.Now())
		case <-reload.C:
			if g.ab != nil {
				if err := g.abRefresh(); err != nil {
					g.log.Warn().Err(err).Msg("A/B: refresh; keeping the arms serving")
				}
			} else if err := g.pol.refresh(); err != nil {
				g.log.Warn().Err(err).Msg("load new checkpoint; keeping the policy serving")
			}
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if serr := g.srv.Shutdown(sctx); serr != nil {
		g.log.Warn().Err(serr).Msg("stop gateway server")
	}
	if eerr := g.endAll(); eerr != nil && err == nil {
		err = eerr
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Handler routes the gateway's endpoints behind the API-key check.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", g.chat)
	mux.HandleFunc("GET /v1/models", g.models)
	mux.HandleFunc("GET /v1/models/{id}", g.model)
	mux.HandleFunc("POST /v1/sessions/{id}/close", g.closeSession)
	mux.HandleFunc("POST /v1/feedback", g.feedback)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path), Type: "invalid_request_error"})
	})
	auth := g.keys.Require(mux, func(w http.ResponseWriter) {
		code := "invalid_api_key"
		writeError(w, &apiError{status: http.StatusUnauthorized, Message: "missing or invalid API key (Authorization: Bearer <key>)",
			Type: "invalid_request_error", Code: &code})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &countingWriter{ResponseWriter: w, g: g}
		auth.ServeHTTP(cw, r)
		cw.note(http.StatusOK) // a handler that wrote nothing
	})
}

// countingWriter counts a request (and an error, status ≥ 400) when its answer's
// status is set, before any of it reaches the client: a client that reads status
// right after its answer finds its request counted.
type countingWriter struct {
	http.ResponseWriter
	g      *Gateway
	status int
}

// note counts the request with status code, once.
func (c *countingWriter) note(code int) {
	if c.status != 0 {
		return
	}
	c.status = code
	c.g.requests.Add(1)
	if code >= 400 {
		c.g.errors.Add(1)
	}
}

func (c *countingWriter) WriteHeader(code int) {
	if code >= 200 { // 1xx: informational, the answer's status comes later
		c.note(code)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	c.note(http.StatusOK)
	return c.ResponseWriter.Write(b)
}

// Flush passes a stream's chunks on at once.
func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// Stats are the gateway's counters (status, /metrics).
type Stats struct {
	Listen, Model string
	// PolicyStep is the serving checkpoint's step (0: the initial model).
	PolicyStep int64
	// Requests and Errors (status ≥ 400, or a stream ended by an error) count HTTP
	// requests since start; Turns the chat turns answered; RolloutsRecorded the
	// sessions written to the spool.
	Requests, Errors, Turns, RolloutsRecorded int64
	// OpenSessions are the sessions open now.
	OpenSessions int64
	// HeldSessions are closed sessions waiting out the feedback window, HeldBytes
	// their journals' bytes, HeldEarly the sessions written before their window
	// ended to keep HeldBytes under gateway.feedback_window_max_bytes.
	HeldSessions, HeldBytes, HeldEarly int64
	// UnusableComments are comments the feedback API took and answered as unusable.
	UnusableComments int64
	// RowsDropped counts the embedded sampler's rows dropped because their
	// client went away (waiting or mid-sample).
	RowsDropped int64
	// Feedback counts the late-feedback records on disk.
	Feedback LateCounts
	// AB is the A/B test (nil: gateway.ab off).
	AB *ABStats
}

// Stats returns the gateway's counters now.
func (g *Gateway) Stats() Stats {
	g.mu.Lock()
	open, held, heldBytes := int64(len(g.sessions)), int64(len(g.held)), g.heldBytesLocked()
	g.mu.Unlock()
	st := Stats{Model: g.cfg.ModelName, Requests: g.requests.Load(), Errors: g.errors.Load(), Turns: g.turns.Load(),
		RolloutsRecorded: g.recorded.Load(), OpenSessions: open, Feedback: g.late.Counts(),
		HeldSessions: held, HeldBytes: heldBytes, HeldEarly: g.heldEarly.Load(), UnusableComments: g.unusableComments.Load()}
	if g.ln != nil {
		st.Listen = g.Addr()
	}
	if p := g.pol.cur.Load(); p != nil {
		st.PolicyStep = p.step
	}
	st.RowsDropped = g.pol.dropped.Load()
	if ab, ok := g.ABStats(); ok {
		st.AB = &ab
	}
	return st
}

// newSessionID returns a fresh session id.
func newSessionID() string {
	var b [8]byte
	rand.Read(b[:])
	return "gw-" + time.Now().UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// acquire returns the session a request continues, locked and marked busy, with
// the number of its messages already recorded (0 for a new session). With an id
// (the X-Hindsight-Session header) it is that session, created if new; without,
// the open session whose messages are the longest proper prefix of msgs, else a
// new one.
func (g *Gateway) acquire(id string, msgs []chatMessage) (*session, int, *apiError) {
	for {
		g.mu.Lock()
		var s *session
		if id != "" {
			if !validID.MatchString(id) {
				g.mu.Unlock()
				return nil, 0, badRequest("", "session id %q: want 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit", id)
			}
			s = g.sessions[id]
			if s == nil && (g.ending[id] != nil || g.held[id] != nil || g.late.Has(id)) {
				g.mu.Unlock()
				return nil, 0, sessionClosed(id)
			}
		} else {
			for _, c := range g.sessions {
				if c.busy == 0 && len(c.messages) < len(msgs) && isPrefix(c.messages, msgs) && (s == nil || len(c.messages) > len(s.messages)) {
					s = c
				}
			}
		}
		if s == nil {
			if id == "" {
				id = newSessionID()
			}
			s = &session{id: id, version: -1}
			g.sessions[id] = s
		}
		s.busy++
		g.mu.Unlock()
		s.mu.Lock()
		if s.ended { // ended between the lookup and the lock: look again
			s.mu.Unlock()
			g.release(s)
			continue
		}
		k := len(s.messages)
		if k > 0 && (len(msgs) <= k || !isPrefix(s.messages, msgs)) {
			s.mu.Unlock()
			g.release(s)
			return nil, 0, badRequest("session_mismatch", "messages do not extend session %s's conversation (%d messages recorded): send its messages, the reply included, then the new ones", s.id, k)
		}
		return s, k, nil
	}
}

// sessionClosed is the answer to a request that names a session already ended:
// its id is its rollout's id, written to the spool once, so a second conversation
// under it would be a duplicate rollout the spool rejects (docs/gateway.md
// "Recording without drift").
func sessionClosed(id string) *apiError {
	code, param := "session_closed", SessionHeader
	return &apiError{status: http.StatusConflict, Type: "invalid_request_error", Code: &code, Param: &param,
		Message: fmt.Sprintf("session %q is closed: it is (or is about to be) written to the spool as rollout %q, and a session id names one rollout for all time; "+
			"send this conversation under a new %s id (or none, to start a new session)", id, id, SessionHeader)}
}

// release marks s idle again (its lock already released); a session that never
// recorded a turn is forgotten.
func (g *Gateway) release(s *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s.busy--
	s.used = time.Now()
	if s.busy == 0 && s.turns == 0 && !s.ended && g.sessions[s.id] == s {
		delete(g.sessions, s.id)
	}
}

// isPrefix reports whether a's messages are the first len(a) of b's.
func isPrefix(a, b []chatMessage) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if a[i].key() != b[i].key() {
			return false
		}
	}
	return true
}

// endIdle ends the sessions idle since before now − idle_timeout (held for the
// feedback window, or written at once without one) and writes the held sessions
// whose window is over to the spool.
func (g *Gateway) endIdle(now time.Time) {
	g.mu.Lock()
	var idle, due []*session
	for id, s := range g.sessions {
		if s.busy == 0 && s.turns > 0 && now.Sub(s.used) >= g.cfg.IdleTimeout {
			delete(g.sessions, id)
			if g.cfg.FeedbackWindow > 0 {
				g.held[id] = s
				s.closedAt = now
				idle = append(idle, s)
			} else {
				g.ending[id] = s
				due = append(due, s)
			}
		}
	}
	for id, s := range g.held {
		if s.busy == 0 && now.Sub(s.closedAt) >= g.cfg.FeedbackWindow {
			delete(g.held, id)
			g.ending[id] = s
			due = append(due, s)
		}
	}
	g.mu.Unlock()
	for _, s := range idle {
		g.markClosed(s, now, "", nil)
	}
	g.trimHeld()
	for _, s := range due {
		why := "idle"
		if !s.closedAt.IsZero() {
			why = "feedback window over"
		}
		if _, err := g.end(s, why); err != nil {
			g.log.Error().Err(err).Str("session", s.id).Msg("write session to the spool; its journal stays for the next start")
		}
	}
}

// endAll writes every open session to the spool (shutdown).
func (g *Gateway) endAll() error {
	g.mu.Lock()
	all := make([]*session, 0, len(g.sessions)+len(g.held))
	for id, s := range g.sessions {
		if s.turns > 0 {
			all = append(all, s)
			g.ending[id] = s
		}
		delete(g.sessions, id)
	}
	for id, s := range g.held { // flushed as they are: the window ends with the process
		all = append(all, s)
		g.ending[id] = s
		delete(g.held, id)
	}
	g.mu.Unlock()
	var errs []error
	for _, s := range all {
		if _, err := g.end(s, "shutdown"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// end writes s (moved from the session map to ending) to the spool.
func (g *Gateway) end(s *session, why string) (string, error) {
	defer func() {
		g.mu.Lock()
		if g.ending[s.id] == s {
			delete(g.ending, s.id)
		}
		g.mu.Unlock()
	}()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if g.ab != nil && s.arm != "" {
		if err := g.ab.ended(s.id); err != nil {
			g.log.Warn().Err(err).Str("session", s.id).Msg("A/B: record the session's end; its turns count again after a restart")
		}
	}
	path, err := s.emit(g.opts.JournalDir, g.opts.Incoming, g.late)
	if err != nil {
		return "", err
	}
	g.recorded.Add(1)
	g.log.Info().Str("session", s.id).Str("why", why).Int("turns", s.turns).Int("tokens", len(s.tokens)).
		Str("file", filepath.Base(path)).Msg("session written to the spool")
	return path, nil
}
