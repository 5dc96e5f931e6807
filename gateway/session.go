package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/wlog"
	"github.com/hindsight-ai/hindsight/rollout"
)

// session is one recorded conversation: the exact tokens of every turn so far (the
// sampled ones with their log-probs, the rendered ones with none), its segments and
// its messages in canonical form. mu is held for a whole turn.
type session struct {
	mu       sync.Mutex
	id       string
	messages []chatMessage
	tokens   []int32
	logprobs []float32
	valid    []bool
	segments []rollout.Segment
	taskID   string
	reward   *float32
	version  int64 // the oldest policy step that sampled a turn; -1 before the first
	tok      string
	turns    int
	journal  *wlog.Log
	ended    bool // written (or being written) to the spool; a request that finds it retries
	used     time.Time
	// rating is a person's −1/0/+1 rating of the whole conversation (nil: none);
	// replySeg[n] is the index in segments of turn n+1's reply, where a comment on
	// that turn goes.
	rating   *int8
	replySeg []int
	// temp is the sampling temperature of every turn so far when tempSeen and not
	// tempMixed; the rollout records it (rollout.Rollout.Temperature). Turns at
	// different temperatures, or one of unknown temperature, leave it unrecorded
	// (null: scored at 1).
	temp                float64
	tempSeen, tempMixed bool
	busy                int // requests holding or waiting for the session (guarded by the Gateway's mu)
	// closedAt is when the session was closed (or ended idle) and began its
	// feedback window (guarded by the Gateway's mu; zero while open).
	closedAt time.Time
	// size is the journal's length in bytes (the disk a held session takes).
	size atomic.Int64
	// With gateway.ab: the round and arm the session was assigned on its first
	// turn, the checkpoint that arm served then and, with gateway.upstream, the
	// model id its requests name. Journaled with every turn: a session never
	// changes checkpoint. latency sums its turns' seconds.
	round   int64
	arm     string
	ck      Checkpoint
	model   string
	latency float64
}

// turnRecord is one line of a session's journal: what one turn appended, and the
// conversation's messages after it. A turn is acknowledged only once its record is
// fsynced.
type turnRecord struct {
	Turn          int           `json:"turn"`
	Messages      []chatMessage `json:"messages"`
	Tokens        []int32       `json:"tokens"`
	LogProbs      []*float32    `json:"logprobs"`
	Segments      []segRecord   `json:"segments"`
	TaskID        string        `json:"task_id,omitempty"`
	Reward        *float32      `json:"reward,omitempty"`
	PolicyVersion int64         `json:"policy_version"`
	Tokenizer     string        `json:"tokenizer"`
	// Temperature is a turn's sampling temperature (the request's; 1 when it named
	// none, 0 when greedy). A turn line without it (a journal written before the
	// field) leaves the session's temperature unknown.
	Temperature *float64 `json:"temperature,omitempty"`
	// Rating, Comment and CommentTurn are a person's feedback (POST /v1/feedback),
	// in a record of their own.
	Rating      *int8  `json:"rating,omitempty"`
	Comment     string `json:"comment,omitempty"`
	CommentTurn int    `json:"comment_turn,omitempty"`
	// ClosedAt marks the session closed at that time: its feedback window began
	// (a restart holds it for the rest of the window).
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// With gateway.ab: the session's round, arm, checkpoint and upstream model
	// (every record), and the turn's latency in seconds (turns only).
	ABRound    int64   `json:"ab_round,omitempty"`
	Arm        string  `json:"arm,omitempty"`
	Checkpoint string  `json:"checkpoint,omitempty"`
	Model      string  `json:"upstream_model,omitempty"`
	Latency    float64 `json:"latency_s,omitempty"`
}

// segRecord is a segment in a journal line.
type segRecord struct {
	Start  int32  `json:"start"`
	End    int32  `json:"end"`
	Kind   string `json:"kind"`
	Tool   string `json:"tool,omitempty"`
	Status int8   `json:"status"`
}

// validID is what a session id may hold: it names the journal and the rollout file.
var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// journalPath is session id's journal in dir.
func journalPath(dir, id string) string { return filepath.Join(dir, id+".jsonl") }

// appendTurn writes rec to the journal and fsyncs it (creating the journal, and
// fsyncing its folder, on the first turn), then applies it to s. A failed append is
// cut off the journal (internal/wlog), so the turn is not recorded and the next one
// starts a clean line.
func (s *session) appendTurn(dir string, rec *turnRecord) error {
	if s.journal == nil {
		log, err := wlog.Open(journalPath(dir, s.id), wlog.Options{})
		if err != nil {
			return fmt.Errorf("open session journal: %w", err)
		}
		s.journal = log
	}
	if err := s.journal.AppendJSON(rec); err != nil {
		return fmt.Errorf("append session journal: %w", err)
	}
	s.size.Store(s.journal.Size())
	s.apply(rec)
	return nil
}

// apply adds what rec records to s.
func (s *session) apply(rec *turnRecord) {
	s.turns = rec.Turn
	s.messages = rec.Messages
	s.tokens = append(s.tokens, rec.Tokens...)
	for _, lp := range rec.LogProbs {
		if lp == nil {
			s.logprobs, s.valid = append(s.logprobs, 0), append(s.valid, false)
		} else {
			s.logprobs, s.valid = append(s.logprobs, *lp), append(s.valid, true)
		}
	}
	for _, sr := range rec.Segments {
		k, _ := rollout.ParseSegmentKind(sr.Kind)
		s.segments = append(s.segments, rollout.Segment{Start: sr.Start, End: sr.End, Kind: k, Tool: sr.Tool, Status: rollout.ToolStatus(sr.Status)})
	}
	if len(rec.Tokens) > 0 && len(rec.Segments) > 0 { // a turn: its reply is its last segment
		s.replySeg = append(s.replySeg, len(s.segments)-1)
		switch {
		case rec.Temperature == nil:
			s.tempMixed = true
		case !s.tempSeen:
			s.temp, s.tempSeen = *rec.Temperature, true
		case *rec.Temperature != s.temp:
			s.tempMixed = true
		}
	}
	if rec.Rating != nil {
		s.rating = rec.Rating
	}
	if rec.Comment != "" && rec.CommentTurn >= 1 && rec.CommentTurn <= len(s.replySeg) {
		seg := &s.segments[s.replySeg[rec.CommentTurn-1]]
		if seg.Feedback != "" {
			seg.Feedback += "\n"
		}
		seg.Feedback += rec.Comment
	}
	if rec.TaskID != "" {
		s.taskID = rec.TaskID
	}
	if rec.Reward != nil {
		s.reward = rec.Reward
	}
	if s.version < 0 || rec.PolicyVersion < s.version {
		s.version = rec.PolicyVersion
	}
	s.tok = rec.Tokenizer
	if rec.Arm != "" && s.arm == "" { // replayed: a live session's arm is set before its first turn
		s.round, s.arm, s.ck, s.model = rec.ABRound, rec.Arm, Checkpoint{Dir: rec.Checkpoint, Step: rec.PolicyVersion, Model: rec.Model}, rec.Model
	}
	s.latency += rec.Latency
}

// readJournal rebuilds a session from its journal, by the line log's rule
// (internal/wlog): a last line a crash cut short is a turn that was never
// acknowledged, so it is cut off and the next append starts a clean line; a line that
// does not decode with lines after it is an error naming the file, the line and its
// byte offset, and the journal is left as it is. A journal without a turn gives nil.
func readJournal(path, id string) (*session, error) {
	s := &session{id: id, version: -1}
	log, err := wlog.Open(path, wlog.Options{Replay: wlog.JSON(func(rec *turnRecord) error {
		s.apply(rec)
		if rec.ClosedAt != nil {
			s.closedAt = *rec.ClosedAt
		}
		return nil
	})})
	if err != nil {
		return nil, fmt.Errorf("read session journal: %w", err)
	}
	if s.turns == 0 {
		return nil, log.Close()
	}
	s.journal = log
	s.size.Store(log.Size())
	return s, nil
}

// rollout returns the session as a rollout row.
func (s *session) rollout() *rollout.Rollout {
	r := &rollout.Rollout{ID: s.id, TaskID: s.taskID, PolicyVersion: max(s.version, 0), Tokenizer: s.tok,
		Tokens: s.tokens, LogProbs: s.logprobs, Segments: s.segments}
	bitmap := make([]byte, (len(s.valid)+7)/8)
	for i, v := range s.valid {
		if v {
			bitmap[i/8] |= 1 << (i % 8)
		}
	}
	r.SetLogProbValidity(bitmap, 0)
	if s.reward != nil {
		r.Reward, r.HasReward = *s.reward, true
	}
	if s.rating != nil {
		r.Feedback, r.HasFeedback = *s.rating, true
	}
	if s.tempSeen && !s.tempMixed {
		r.Temperature, r.HasTemperature = float32(s.temp), true
	}
	return r
}

// fileName is the session's rollout file name in incoming/.
func (s *session) fileName() string { return "gateway-" + s.id + ".arrow" }

// emit writes the session to incoming/ as a rollout file (temp, fsync, rename,
// fsync folder), then removes its journal. A crash between the two re-emits the
// same file on the next start; the spool's rollout_id dedupe keeps it from being
// trained twice. Before the file, late records the session as written, so feedback
// from then on becomes a follow-up record the daemon joins.
func (s *session) emit(journalDir, incoming string, late *LateFeedback) (string, error) {
	if err := late.Written(s.id, s.replySeg); err != nil {
		return "", fmt.Errorf("emit session %s: %w", s.id, err)
	}
	path := filepath.Join(incoming, s.fileName())
	if err := rollout.WriteFile(path, []*rollout.Rollout{s.rollout()}, rollout.WriteOptions{}); err != nil {
		return "", fmt.Errorf("emit session %s: %w", s.id, err)
	}
	if s.journal != nil {
		s.journal.Close()
		s.journal = nil
	}
	if err := os.Remove(journalPath(journalDir, s.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return path, fmt.Errorf("emit session %s: remove journal: %w", s.id, err)
	}
	if err := fsutil.SyncDir(journalDir); err != nil {
		return path, fmt.Errorf("emit session %s: %w", s.id, err)
	}
	return path, nil
}
