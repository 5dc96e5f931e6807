package daemon

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/eval"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/status"
	"github.com/hindsight-ai/hindsight/teacher"
)

const (
	stateStarting = hindsightv1.State_STATE_STARTING
	stateReady    = hindsightv1.State_STATE_READY
	stateDraining = hindsightv1.State_STATE_DRAINING
)

// rateWindow is how far back the ingest rate looks.
const rateWindow = time.Minute

// stats owns the daemon's counters and publishes immutable status snapshots through
// an atomic pointer: readers (the status server, metrics) never lock the pipeline.
type stats struct {
	version string
	dataDir string
	storage *hindsightv1.StorageInfo // probed at start-up; set once, before the first publish
	started time.Time
	spool   *rollout.Spool
	// pause and teacher read the pause state and the teacher's counters; set before
	// the first publish (teacher stays nil without training).
	pause   func() *hindsightv1.PauseState
	teacher func() *teacher.Stats

	mu         sync.Mutex
	state      hindsightv1.State
	wasReady   bool // state has been stateReady
	listenAddr string
	session    rollout.Totals
	samples    []rateSample // (time, session accepted) every publish, oldest first
	lastErr    string
	lastErrAt  time.Time
	lastErrF   string
	counts     rollout.Counts
	train      trainStats
	// evals reads the eval recorder's latest and best results; nil without suites.
	evals func() (latest, best []eval.Result)
	// gateway reads the gateway's counters and the engine hooks' states (nil before
	// the gateway is opened).
	gateway func() (*hindsightv1.GatewayStats, []*hindsightv1.EngineHookState)

	snap atomic.Pointer[hindsightv1.Status]
	hist *status.History // a point per publish, for the status page
}

type rateSample struct {
	at               time.Time
	rollouts, tokens int64
}

func newStats(version, dataDir string, storage fsutil.Features, started time.Time, sp *rollout.Spool, pause func() *hindsightv1.PauseState) *stats {
	dir, err := filepath.Abs(dataDir)
	if err != nil {
		dir = dataDir
	}
	si := &hindsightv1.StorageInfo{FsType: storage.FSType, RenameNoreplace: storage.RenameNoReplace,
		HardLinks: storage.HardLinks, Symlinks: storage.Symlinks, RenameMode: storage.RenameMode()}
	return &stats{version: version, dataDir: dir, storage: si, started: started, spool: sp, pause: pause, state: stateStarting,
		hist: status.NewHistory(status.HistorySize)}
}

// snapshot returns the latest published status; never mutate it.
func (s *stats) snapshot() *hindsightv1.Status { return s.snap.Load() }

func (s *stats) setState(st hindsightv1.State) {
	s.mu.Lock()
	s.state = st
	s.wasReady = s.wasReady || st == stateReady
	s.mu.Unlock()
	s.publish()
}

// everReady reports whether the daemon has been ready in this run (nil: it never
// got as far as its status).
func (s *stats) everReady() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wasReady
}

func (s *stats) claimed() {
	s.mu.Lock()
	s.session.FilesClaimed++
	s.mu.Unlock()
}

func (s *stats) fileDone(rep *rollout.FileReport, _ time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch rep.Outcome {
	case rollout.OutcomeDone:
		s.session.FilesDone++
	case rollout.OutcomeFailed:
		s.session.FilesFailed++
	case rollout.OutcomeQuarantined:
		s.session.FilesQuarantined++
	}
	s.session.RolloutsAccepted += int64(rep.Accepted)
	s.session.RolloutsRejected += int64(rep.Rejected)
	s.session.TokensAccepted += rep.Tokens
	s.session.LastSeq = rep.Seq
}

// setGateway sets where the gateway's counters and the hooks' states are read.
func (s *stats) setGateway(f func() (*hindsightv1.GatewayStats, []*hindsightv1.EngineHookState)) {
	s.mu.Lock()
	s.gateway = f
	s.mu.Unlock()
}

// setError records the most recent problem that lost work.
func (s *stats) setError(err error, file string) {
	s.mu.Lock()
	s.lastErr, s.lastErrAt, s.lastErrF = err.Error(), time.Now(), file
	s.mu.Unlock()
}

// publish builds a fresh snapshot from the journal, the spool folders and the session
// counters, and swaps it in.
func (s *stats) publish() {
	counts, err := s.spool.Counts()
	total := s.spool.Journal().Totals()
	now := time.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.counts = counts
	}
	s.samples = append(s.samples, rateSample{now, s.session.RolloutsAccepted, s.session.TokensAccepted})
	for len(s.samples) > 2 && now.Sub(s.samples[1].at) > rateWindow {
		s.samples = s.samples[1:]
	}
	var rps, tps float64
	if first := s.samples[0]; now.Sub(first.at) > 0 {
		dt := now.Sub(first.at).Seconds()
		rps = float64(s.session.RolloutsAccepted-first.rollouts) / dt
		tps = float64(s.session.TokensAccepted-first.tokens) / dt
	}
	st := &hindsightv1.Status{
		Version:    s.version,
		State:      s.state,
		StartedAt:  timestamppb.New(s.started),
		Uptime:     durationpb.New(time.Since(s.started)),
		DataDir:    s.dataDir,
		ListenAddr: s.listenAddr,
		Spool: &hindsightv1.SpoolCounts{Incoming: s.counts.Incoming, Processing: s.counts.Processing,
			Done: s.counts.Done, Failed: s.counts.Failed},
		Total:         ingestProto(total, rps, tps), // rates are this process's in both
		Session:       ingestProto(s.session, rps, tps),
		LastError:     s.lastErr,
		LastErrorFile: s.lastErrF,
		Storage:       s.storage,
	}
	st.Total.JournalSeq = total.LastSeq
	if !s.lastErrAt.IsZero() {
		st.LastErrorAt = timestamppb.New(s.lastErrAt)
	}
	s.fillTraining(st)
	if s.gateway != nil {
		st.Gateway, st.EngineHooks = s.gateway()
	}
	if s.evals != nil {
		latest, best := s.evals()
		st.Evals, st.BestEvals = evalProtos(latest), evalProtos(best)
	}
	s.snap.Store(st)
	s.hist.Add(status.Sample(st))
}

func ingestProto(t rollout.Totals, rps, tps float64) *hindsightv1.IngestStats {
	return &hindsightv1.IngestStats{
		FilesClaimed: t.FilesClaimed, FilesDone: t.FilesDone, FilesFailed: t.FilesFailed,
		FilesQuarantined: t.FilesQuarantined, RolloutsAccepted: t.RolloutsAccepted,
		RolloutsRejected: t.RolloutsRejected, TokensIngested: t.TokensAccepted, JournalSeq: t.LastSeq,
		RolloutsPerSecond: rps, TokensPerSecond: tps,
	}
}

// line is a one-line summary for systemd's STATUS=.
func (s *stats) line() string {
	st := s.snapshot()
	if st == nil {
		return "starting"
	}
	line := fmt.Sprintf("%s: incoming %d, processing %d; accepted %d, rejected %d rollouts",
		strings.ToLower(strings.TrimPrefix(st.State.String(), "STATE_")), st.Spool.Incoming, st.Spool.Processing, st.Total.RolloutsAccepted, st.Total.RolloutsRejected)
	if t := st.Training; t != nil {
		line += fmt.Sprintf("; step %d, loss %.4g, %d trained", t.Step, t.Loss, t.RolloutsTrained)
	}
	return line
}
