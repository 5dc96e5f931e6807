package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sync"
	"time"

	"github.com/hindsight-ai/hindsight/gateway/abstat"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/wlog"
)

// The A/B test (docs/gateway.md "Which checkpoint do people prefer"). A round
// compares two checkpoints: the default, which serves every session outside the
// test, and a candidate, which serves a share of the new sessions. A session's
// arm is chosen once, on its first turn, from gateway.ab.seed and its id, and is
// journaled with every turn: it never changes checkpoint, across restarts too.
// Per arm the round counts sessions, turns and their latency, ratings and
// comments from the feedback API, and the rewards of /sessions/{id}/close.
//
// Durable state, <data_dir>/state/ab/:
//   - ab.jsonl (internal/wlog): the round ("round": its arms), then one line per
//     session event (assign, feedback, outcome, end), replayed at start-up, so a
//     restart keeps the counts; rewritten to the new round's line when a round
//     begins.
//   - decisions.jsonl (internal/wlog): every promotion and rollback with its
//     numbers, never rewritten: the history.

// Arm roles.
const (
	ArmDefault   = "default"
	ArmCandidate = "candidate"
)

// Checkpoint names a servable policy: a checkpoint directory (or the initial
// model directory, step 0).
type Checkpoint struct {
	Dir  string `json:"dir"`
	Step int64  `json:"step"`
	// Model is, with gateway.upstream, the model id the engine serves it under:
	// upstream_model for the checkpoint the test began with, <candidate_prefix>-
	// step-<N> for each candidate (loaded under that name by the engine hooks), so
	// a name never changes weights while a session uses it.
	Model string `json:"model,omitempty"`
}

// abRecord is one line of ab.jsonl.
type abRecord struct {
	T         string      `json:"t"` // round, assign, feedback, outcome, end
	Round     int64       `json:"round,omitempty"`
	Default   *Checkpoint `json:"default,omitempty"`
	Candidate *Checkpoint `json:"candidate,omitempty"`
	// Floor is the newest step decided: a checkpoint becomes a candidate only
	// when it is newer (a rolled-back one is never tried again).
	Floor   int64     `json:"floor,omitempty"`
	At      time.Time `json:"at,omitzero"`
	Session string    `json:"session,omitempty"`
	Arm     string    `json:"arm,omitempty"`
	Rating  *int8     `json:"rating,omitempty"`
	Comment bool      `json:"comment,omitempty"`
	Reward  *float64  `json:"reward,omitempty"`
	Turns   int       `json:"turns,omitempty"`
	Latency float64   `json:"latency_s,omitempty"`
}

// abSession is one session's part in the round.
type abSession struct {
	arm      string
	rating   *int8
	comments int
	reward   *float64
	turns    int
	latency  float64 // seconds, over its turns
	ended    bool    // its end line is written: its turns and latency are final
}

// Decision is one promotion or rollback, with the numbers it was made on
// (decisions.jsonl, status).
type Decision struct {
	At     time.Time `json:"at"`
	Round  int64     `json:"round"`
	Action string    `json:"action"` // promote or rollback
	// By is "rule" or who decided by hand (hindsight ab sends user@host).
	By        string     `json:"by"`
	Reason    string     `json:"reason"`
	Default   Checkpoint `json:"default"`
	Candidate Checkpoint `json:"candidate"`
	// The rule's numbers when it was made: the metric, the sessions with data
	// per arm, each arm's estimate and the difference (candidate − default) with
	// its interval at Confidence, the margin, and the eval suites' primary
	// metrics per arm.
	Metric     string             `json:"metric"`
	Confidence float64            `json:"confidence"`
	Margin     float64            `json:"margin"`
	DefaultN   int64              `json:"default_n"`
	CandN      int64              `json:"candidate_n"`
	DefaultEst float64            `json:"default_est"`
	CandEst    float64            `json:"candidate_est"`
	Diff       abstat.Interval    `json:"diff"`
	EvalsDef   map[string]float64 `json:"evals_default,omitempty"`
	EvalsCand  map[string]float64 `json:"evals_candidate,omitempty"`
}

// abTest is the A/B state: the round's arms, its sessions, the decisions.
type abTest struct {
	cfg  ABConfig
	log  *wlog.Log // ab.jsonl
	hist *wlog.Log // decisions.jsonl

	mu        sync.Mutex
	round     int64
	def, cand *Checkpoint // cand nil: no candidate in test
	floor     int64
	started   time.Time
	sess      map[string]*abSession
	decisions []Decision
	version   int64 // bumped on every change: the cached intervals' key
	cache     struct {
		version int64
		st      ABStats
		stale   bool // its bootstrap intervals lag the outcomes (bootEvery)
	}
	// boot holds the bootstrap intervals (the rewards' resamples cost about 0.5 s
	// per 10,000 outcomes an arm: BenchmarkBootstrapDiff), recomputed when the
	// outcomes changed and at most every bootEvery.
	boot struct {
		at                time.Time
		round, nDef, nCan int64
		def, cand, diff   abstat.Interval
	}
}

// bootEvery is how often the bootstrap intervals are recomputed at most while
// outcomes keep coming.
const bootEvery = 10 * time.Second

// openAB opens (or creates) dir's ab.jsonl and decisions.jsonl and replays them.
func openAB(dir string, cfg ABConfig) (*abTest, error) {
	if err := fsutil.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("open A/B state: %w", err)
	}
	a := &abTest{cfg: cfg, sess: map[string]*abSession{}}
	var err error
	a.hist, err = wlog.Open(filepath.Join(dir, "decisions.jsonl"), wlog.Options{Replay: wlog.JSON(func(d *Decision) error {
		a.decisions = append(a.decisions, *d)
		return nil
	})})
	if err != nil {
		return nil, fmt.Errorf("open A/B decisions: %w", err)
	}
	a.log, err = wlog.Open(filepath.Join(dir, "ab.jsonl"), wlog.Options{Replay: wlog.JSON(func(r *abRecord) error {
		a.apply(r)
		return nil
	})})
	if err != nil {
		a.hist.Close()
		return nil, fmt.Errorf("open A/B state: %w", err)
	}
	return a, nil
}

// apply adds one ab.jsonl line to the state (a.mu held or not yet shared).
func (a *abTest) apply(r *abRecord) {
	a.version++
	if r.T == "round" {
		a.round, a.def, a.cand, a.floor, a.started = r.Round, r.Default, r.Candidate, r.Floor, r.At
		a.sess = map[string]*abSession{}
		return
	}
	s := a.sess[r.Session]
	if r.T == "assign" {
		if s == nil && r.Round == a.round {
			a.sess[r.Session] = &abSession{arm: r.Arm}
		}
		return
	}
	if s == nil { // a session of an earlier round, or of none
		return
	}
	switch r.T {
	case "feedback":
		if r.Rating != nil {
			s.rating = r.Rating
		}
		if r.Comment {
			s.comments++
		}
	case "outcome":
		s.reward = r.Reward
	case "end":
		s.turns, s.latency, s.ended = r.Turns, r.Latency, true
	}
}

// append writes r durably and applies it.
func (a *abTest) append(r *abRecord) error {
	if err := a.log.AppendJSON(r); err != nil {
		return fmt.Errorf("record A/B %s: %w", r.T, err)
	}
	a.apply(r)
	return nil
}

// begin starts a new round with these arms: ab.jsonl is rewritten to its one
// line (the previous round's session lines are over).
func (a *abTest) begin(def, cand *Checkpoint, floor int64) error {
	r := &abRecord{T: "round", Round: a.round + 1, Default: def, Candidate: cand, Floor: floor, At: time.Now().UTC()}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := a.log.Rewrite(func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return fmt.Errorf("begin A/B round %d: %w", r.Round, err)
	}
	a.apply(r)
	return nil
}

// arms returns the round's number, default and candidate (nil: none).
func (a *abTest) arms() (int64, *Checkpoint, *Checkpoint) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.round, a.def, a.cand
}

// choose returns the arm a new session id gets now: the candidate when there is
// one and abstat.Unit(seed, id) < share.
func (a *abTest) choose(id string) (round int64, arm string, ck Checkpoint) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cand != nil && abstat.Unit(a.cfg.Seed, id) < a.cfg.Share {
		return a.round, ArmCandidate, *a.cand
	}
	return a.round, ArmDefault, *a.def
}

// assigned records that session id, in round, answered its first turn on arm. A
// session already known (its journal replayed after a crash) is left as it is.
func (a *abTest) assigned(id string, round int64, arm string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if round != a.round || a.sess[id] != nil {
		return nil
	}
	return a.append(&abRecord{T: "assign", Round: round, Session: id, Arm: arm})
}

// turn counts one answered turn of session id (in memory; its end line makes it
// durable, and a restart counts an open session's journaled turns again).
func (a *abTest) turn(id string, seconds float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.sess[id]; s != nil && !s.ended {
		s.turns++
		s.latency += seconds
		a.version++
	}
}

// reopened counts a session reopened from its journal: its turns and their
// latency, unless its end line was written before the crash.
func (a *abTest) reopened(id string, round int64, arm string, turns int, latency float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if round != a.round {
		return
	}
	s := a.sess[id]
	if s == nil {
		if err := a.append(&abRecord{T: "assign", Round: round, Session: id, Arm: arm}); err != nil {
			return
		}
		s = a.sess[id]
	}
	if !s.ended {
		s.turns, s.latency = turns, latency
		a.version++
	}
}

// feedback records a rating and/or a comment on session id (ignored outside the
// round).
func (a *abTest) feedback(id string, rating *int8, comment bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sess[id] == nil {
		return nil
	}
	return a.append(&abRecord{T: "feedback", Session: id, Rating: rating, Comment: comment})
}

// outcome records the reward a close gave session id.
func (a *abTest) outcome(id string, reward float32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sess[id] == nil {
		return nil
	}
	r := float64(reward)
	return a.append(&abRecord{T: "outcome", Session: id, Reward: &r})
}

// ended records session id's final turns and latency, before it is written to
// the spool.
func (a *abTest) ended(id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sess[id]
	if s == nil || s.ended {
		return nil
	}
	return a.append(&abRecord{T: "end", Session: id, Turns: s.turns, Latency: s.latency})
}

// close closes the logs.
func (a *abTest) close() {
	a.log.Close()
	a.hist.Close()
}
