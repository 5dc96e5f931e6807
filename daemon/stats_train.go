package daemon

import (
	"math"
	rtmetrics "runtime/metrics"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// trainStats is the training part of the status; guarded by stats.mu.
type trainStats struct {
	on          bool
	training    hindsightv1.TrainingStats
	ckpt        *hindsightv1.CheckpointInfo
	credit      hindsightv1.CreditStats
	queues      hindsightv1.QueueDepths
	backend     hindsightv1.BackendInfo
	hints       map[string]int64 // hints trained on, by source
	teachN      int64
	teachTook   time.Duration
	lastLoss    float64
	lastStepAt  time.Time
	lastStepDur time.Duration
	// compileDir is the compiled-program cache's directory, "" when off.
	compileDir string
	// progress reads the step on the device now (train.Loop.Progress); set before
	// the first publish with training.
	progress func() (xla.StepProgress, xla.StepRates, bool)
}

// stepInProgressProto is the status of the step on the device at now.
func stepInProgressProto(p xla.StepProgress, prev xla.StepRates, now time.Time) *hindsightv1.StepInProgress {
	sp := &hindsightv1.StepInProgress{Step: p.Step, Phase: string(p.Phase), Rollouts: int64(p.Rollouts), Tokens: p.Tokens,
		RolloutsScored: int64(p.RolloutsScored), TokensScored: p.TokensScored,
		RolloutsGradient: int64(p.RolloutsGradient), TokensGradient: p.TokensGradient,
		StartedAt: timestamppb.New(p.Started), Elapsed: durationpb.New(now.Sub(p.Started))}
	if eta, ok := p.ETA(now, prev); ok {
		sp.Eta = durationpb.New(eta)
	}
	return sp
}

// setBackend records the trainer's backend; choice says why it runs there
// (xla.Choice.Reason).
func (s *stats) setBackend(name, device string, params int64, modelDir, choice string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.train.on = true
	s.train.backend = hindsightv1.BackendInfo{Name: name, Device: device, Parameters: params, ModelDir: modelDir, Choice: choice}
}

// setCompileCache records where the compiled-program cache is ("" when off).
func (s *stats) setCompileCache(dir string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.train.compileDir = dir
}

// compileProto is what compiling cost this process so far.
func compileProto(c xla.CompileStats, dir string) *hindsightv1.CompileStats {
	return &hindsightv1.CompileStats{ProgramsCompiled: c.Compiled, CompileTime: durationpb.New(c.CompileTime),
		ProgramsLoaded: c.Loaded, LoadTime: durationpb.New(c.LoadTime), CacheRejected: c.Rejected,
		CacheEvicted: c.Evicted, CacheDir: dir, ProgramsPreloaded: c.Preloaded, PreloadTime: durationpb.New(c.PreloadTime),
		ProgramsWarmed: c.Warmed, WarmTime: durationpb.New(c.WarmTime)}
}

// setProgress gives the status the device loop's step in progress.
func (s *stats) setProgress(f func() (xla.StepProgress, xla.StepRates, bool)) {
	s.mu.Lock()
	s.train.progress = f
	s.mu.Unlock()
}

func (s *stats) setCheckpoint(step int64, path string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.train.ckpt = &hindsightv1.CheckpointInfo{Step: step, Path: path, WrittenAt: timestamppb.New(at)}
}

func (s *stats) trainedTotal(trained, step, updates int64, budget int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := &s.train.training
	t.RolloutsTrained, t.Step, t.Updates, t.TokenBudget = trained, step, updates, int64(budget)
}

func (s *stats) skipped() {
	s.mu.Lock()
	s.train.training.RolloutsSkipped++
	s.mu.Unlock()
}

// failed counts a rollout the device could not train, and records why.
func (s *stats) failed(err error, file string) {
	s.mu.Lock()
	s.train.training.RolloutsFailed++
	s.lastErr, s.lastErrAt, s.lastErrF = err.Error(), time.Now(), file
	s.mu.Unlock()
}

func (s *stats) creditFile() {
	s.mu.Lock()
	s.train.training.CreditFiles++
	s.mu.Unlock()
}

func (s *stats) hintsTrained(hs []teacher.Hint) {
	if len(hs) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.train.hints == nil {
		s.train.hints = map[string]int64{}
	}
	for _, h := range hs {
		s.train.hints[h.Source]++
	}
}

func (s *stats) teacherTook(d time.Duration) {
	s.mu.Lock()
	s.train.teachN++
	s.train.teachTook += d
	s.mu.Unlock()
}

func (s *stats) setBatch(rollouts, tokens int) {
	s.mu.Lock()
	s.train.training.BatchRollouts, s.train.training.BatchTokens = int64(rollouts), int64(tokens)
	s.mu.Unlock()
}

func (s *stats) setQueues(files, rollouts, awaiting int64) {
	s.mu.Lock()
	s.train.queues = hindsightv1.QueueDepths{Files: files, Rollouts: rollouts, FilesAwaitingCheckpoint: awaiting}
	s.mu.Unlock()
}

// stepDone records one optimizer step; scored tokens went through the scoring passes
// in scoreTook.
func (s *stats) stepDone(m xla.Metrics, scored int, scoreTook time.Duration) {
	s.mu.Lock()
	t := &s.train.training
	t.Step, t.Loss, t.LearningRate, t.GradNorm = m.Step, m.Loss, m.LR, m.GradNorm
	t.LossOut, t.LossDistill = m.Terms.Out, m.Terms.Distill
	t.OutTokens, t.DistillTokens = int64(m.Credit.OutTokens), int64(m.Credit.DistillTokens)
	t.GradNormOut, t.GradNormDistill = nil, nil
	if !math.IsNaN(m.OutGradNorm) { // NaN: train.term_grad_norms is off
		t.GradNormOut, t.GradNormDistill = proto.Float64(m.OutGradNorm), proto.Float64(m.DistillGradNorm)
	}
	if m.Took > 0 {
		t.TrainTokensPerSecond = float64(m.Tokens) / m.Took.Seconds()
	}
	if scoreTook > 0 {
		t.ScoreTokensPerSecond = float64(scored) / scoreTook.Seconds()
	}
	t.RolloutsTrained += int64(m.Rollouts)
	t.SessionSteps++
	if m.Updated {
		t.Updates++
	} else {
		t.SessionStepsWithoutUpdate++
	}
	s.train.lastStepAt, s.train.lastStepDur = time.Now(), m.Took
	c := m.Credit
	s.train.credit = hindsightv1.CreditStats{DeltaAbsMean: c.DeltaAbsMean, DeltaAbsP99: c.DeltaAbsP99,
		ClipFraction: c.ClipFraction, PivotShare: c.TopShare, Tokens: int64(c.Tokens), HintTokens: int64(c.HintTokens),
		OutcomeAdvantageMean: c.AOutMean, HintAdvantageAbsMean: c.AHintAbsMean}
	s.mu.Unlock()
	s.publish()
}

// fillTraining adds the training fields to st; s.mu is held.
func (s *stats) fillTraining(st *hindsightv1.Status) {
	if ps := s.pause(); ps != nil {
		st.Paused, st.PauseReason, st.Pause = true, reasonLine(ps), ps
	}
	if !s.train.on {
		return
	}
	tr := proto.Clone(&s.train.training).(*hindsightv1.TrainingStats)
	if !s.train.lastStepAt.IsZero() {
		tr.LastStepAt = timestamppb.New(s.train.lastStepAt)
		tr.LastStepTook = durationpb.New(s.train.lastStepDur)
	}
	if s.train.progress != nil {
		if p, prev, ok := s.train.progress(); ok {
			tr.StepInProgress = stepInProgressProto(p, prev, time.Now())
		}
	}
	st.Training = tr
	if s.train.ckpt != nil {
		st.LastCheckpoint = proto.Clone(s.train.ckpt).(*hindsightv1.CheckpointInfo)
	}
	st.Credit = proto.Clone(&s.train.credit).(*hindsightv1.CreditStats)
	st.Queues = proto.Clone(&s.train.queues).(*hindsightv1.QueueDepths)
	st.Backend = proto.Clone(&s.train.backend).(*hindsightv1.BackendInfo)
	if strings.HasPrefix(st.Backend.Name, "go") {
		// The pure-Go backend keeps tensors on the Go heap. For XLA, GoMLX exposes no
		// PJRT memory statistics, so the field stays 0 (process RSS is in /metrics).
		st.Backend.MemoryBytes, st.Backend.MemoryKind = goHeapInUse(), "go_heap_inuse"
	} else {
		st.Backend.Compile = compileProto(xla.CompileSnapshot(), s.train.compileDir)
	}
	ts := &hindsightv1.TeacherStats{HintsBySource: map[string]int64{}, FailuresByKind: map[string]int64{}, CommentsDropped: map[string]int64{}}
	for k, v := range s.train.hints {
		ts.HintsBySource[k] = v
	}
	if s.teacher != nil {
		snap := s.teacher().Snapshot()
		for k, v := range snap.Failed {
			ts.FailuresByKind[k] = v
		}
		ts.Rollouts, ts.Selections, ts.Requests, ts.CacheHits = snap.Rollouts, snap.Selections, snap.Requests, snap.CacheHits
		ts.BreakerState = snap.BreakerState
		for k, v := range snap.CommentsDropped {
			ts.CommentsDropped[k] = v
		}
	}
	if s.train.teachN > 0 {
		ts.MeanLatency = durationpb.New(s.train.teachTook / time.Duration(s.train.teachN))
	}
	st.Teacher = ts
}

// goHeapInUse is the bytes of live and not-yet-swept heap objects (runtime/metrics,
// no stop-the-world).
func goHeapInUse() int64 {
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	rtmetrics.Read(sample)
	if sample[0].Value.Kind() != rtmetrics.KindUint64 {
		return 0
	}
	return int64(sample[0].Value.Uint64())
}
