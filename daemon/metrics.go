package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/rollout"
)

// metrics are the Prometheus series served on /metrics. Spool and journal gauges read
// the published snapshot, so scraping never touches the pipeline.
type metrics struct {
	files    *prometheus.CounterVec
	rollouts *prometheus.CounterVec
	rejected *prometheus.CounterVec
	tokens   prometheus.Counter
}

// newMetrics registers the daemon's series on reg; diskDirs are the directories whose
// file systems hindsight_disk_*_bytes report.
func newMetrics(reg *prometheus.Registry, s *stats, version string, diskDirs []string) *metrics {
	m := &metrics{
		files: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsight_files_total",
			Help: "Spool files finished by this process, by outcome (done, failed, quarantined)."}, []string{"outcome"}),
		rollouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsight_rollouts_total",
			Help: "Rollouts decided by this process, by decision (accepted, rejected)."}, []string{"decision"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "hindsight_rollouts_rejected_total",
			Help: "Rejected rollouts by problem code (E_LEN_MISMATCH, …)."}, []string{"code"}),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "hindsight_tokens_ingested_total",
			Help: "Tokens of rollouts accepted by this process."}),
	}
	for _, o := range []string{rollout.OutcomeDone, rollout.OutcomeFailed, rollout.OutcomeQuarantined} {
		m.files.WithLabelValues(o)
	}
	m.rollouts.WithLabelValues("accepted")
	m.rollouts.WithLabelValues("rejected")
	trainGauge := func(name, help string, get func(*hindsightv1.Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if st := s.snapshot(); st != nil {
				return get(st)
			}
			return 0
		})
	}
	spool := func(dir string, get func(c rollout.Counts) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hindsight_spool_files",
			Help: "Files in each spool folder.", ConstLabels: prometheus.Labels{"dir": dir}}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(get(s.counts))
		})
	}
	reg.MustRegister(m.files, m.rollouts, m.rejected, m.tokens,
		spool(rollout.DirIncoming, func(c rollout.Counts) int64 { return c.Incoming }),
		spool(rollout.DirProcessing, func(c rollout.Counts) int64 { return c.Processing }),
		spool(rollout.DirDone, func(c rollout.Counts) int64 { return c.Done }),
		spool(rollout.DirFailed, func(c rollout.Counts) int64 { return c.Failed }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hindsight_journal_seq",
			Help: "Sequence number of the last claim in the journal."}, func() float64 {
			if st := s.snapshot(); st != nil {
				return float64(st.Total.JournalSeq)
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hindsight_ready",
			Help: "1 while the daemon is ready (claiming work), else 0."}, func() float64 {
			if st := s.snapshot(); st != nil && st.State == stateReady {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "hindsight_build_info",
			Help: "Always 1; the version label says which build runs.", ConstLabels: prometheus.Labels{"version": version}},
			func() float64 { return 1 }),
		trainGauge("hindsight_train_step", "Steps taken (the policy version), with or without an update.", func(st *hindsightv1.Status) float64 { return float64(st.GetTraining().GetStep()) }),
		trainGauge("hindsight_train_updates", "Optimizer updates applied to the policy: steps less those without signal.", func(st *hindsightv1.Status) float64 { return float64(st.GetTraining().GetUpdates()) }),
		trainGauge("hindsight_train_loss", "Loss of the last optimizer step.", func(st *hindsightv1.Status) float64 { return st.GetTraining().GetLoss() }),
		trainGauge("hindsight_train_learning_rate", "Learning rate of the last step.", func(st *hindsightv1.Status) float64 { return st.GetTraining().GetLearningRate() }),
		trainGauge("hindsight_train_grad_norm", "Gradient L2 norm of the last step, before clipping.", func(st *hindsightv1.Status) float64 { return st.GetTraining().GetGradNorm() }),
		trainGauge("hindsight_train_tokens_per_second", "Tokens through the gradient passes per second, last step.", func(st *hindsightv1.Status) float64 { return st.GetTraining().GetTrainTokensPerSecond() }),
		trainGauge("hindsight_score_tokens_per_second", "Tokens through the scoring passes per second, last step.", func(st *hindsightv1.Status) float64 { return st.GetTraining().GetScoreTokensPerSecond() }),
		trainGauge("hindsight_rollouts_trained", "Rollouts whose gradient is in the weights (lifetime).", func(st *hindsightv1.Status) float64 { return float64(st.GetTraining().GetRolloutsTrained()) }),
		trainGauge("hindsight_rollouts_skipped", "Rollouts skipped for policy lag by this process.", func(st *hindsightv1.Status) float64 { return float64(st.GetTraining().GetRolloutsSkipped()) }),
		trainGauge("hindsight_checkpoint_step", "Step of the newest durable checkpoint.", func(st *hindsightv1.Status) float64 { return float64(st.GetLastCheckpoint().GetStep()) }),
		trainGauge("hindsight_credit_delta_abs_mean", "Mean |Δ| over hint tokens of the last step, nats.", func(st *hindsightv1.Status) float64 { return st.GetCredit().GetDeltaAbsMean() }),
		trainGauge("hindsight_credit_clip_fraction", "Share of hint tokens clipped in the last step.", func(st *hindsightv1.Status) float64 { return st.GetCredit().GetClipFraction() }),
		trainGauge("hindsight_queue_rollouts", "Rollouts with the teacher or waiting for the device.", func(st *hindsightv1.Status) float64 { return float64(st.GetQueues().GetRollouts()) }),
		evalCollector{s},
		termCollector{s},
		gatewayCollector{s},
		abCollector{s},
		alertCollector{s: s, dirs: diskDirs},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// termCollector serves the last step's two loss terms from the published status
// (docs/distillation.md "Two terms kept apart"): hindsight_train_term_loss{term},
// hindsight_train_term_tokens{term} and, only with train.term_grad_norms,
// hindsight_train_term_grad_norm{term}; term is "out" or "distill". Nothing is
// served before the first step.
type termCollector struct{ s *stats }

var (
	termLossDesc = prometheus.NewDesc("hindsight_train_term_loss",
		"The last step's loss term at the weights before its update: out (outcome policy gradient) or distill (hint or divergence).",
		[]string{"term"}, nil)
	termTokensDesc = prometheus.NewDesc("hindsight_train_term_tokens",
		"The last step's token count of each loss term (its denominator under credit.normalize: separate).",
		[]string{"term"}, nil)
	termGradNormDesc = prometheus.NewDesc("hindsight_train_term_grad_norm",
		"L2 norm of each loss term's gradient in the last step, before clipping (train.term_grad_norms only).",
		[]string{"term"}, nil)
)

func (c termCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- termLossDesc
	ch <- termTokensDesc
	ch <- termGradNormDesc
}

func (c termCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.snapshot()
	t := st.GetTraining()
	if t.GetLastStepAt() == nil {
		return
	}
	g := prometheus.GaugeValue
	ch <- prometheus.MustNewConstMetric(termLossDesc, g, t.GetLossOut(), "out")
	ch <- prometheus.MustNewConstMetric(termLossDesc, g, t.GetLossDistill(), "distill")
	ch <- prometheus.MustNewConstMetric(termTokensDesc, g, float64(t.GetOutTokens()), "out")
	ch <- prometheus.MustNewConstMetric(termTokensDesc, g, float64(t.GetDistillTokens()), "distill")
	if t.GradNormOut != nil {
		ch <- prometheus.MustNewConstMetric(termGradNormDesc, g, t.GetGradNormOut(), "out")
		ch <- prometheus.MustNewConstMetric(termGradNormDesc, g, t.GetGradNormDistill(), "distill")
	}
}

// gatewayCollector serves the gateway's counters and the engine hooks' states from
// the published status; nothing without a gateway or hooks.
type gatewayCollector struct{ s *stats }

var (
	gwRequestsDesc = prometheus.NewDesc("hindsight_gateway_requests_total", "HTTP requests the gateway answered (this process).", nil, nil)
	gwErrorsDesc   = prometheus.NewDesc("hindsight_gateway_errors_total",
		"Gateway requests answered with an error: status ≥ 400, or a stream ended by an error event (this process).", nil, nil)
	gwTurnsDesc    = prometheus.NewDesc("hindsight_gateway_turns_total", "Chat turns the gateway answered (this process).", nil, nil)
	gwRecordedDesc = prometheus.NewDesc("hindsight_gateway_rollouts_recorded_total", "Sessions the gateway wrote to the spool as rollouts (this process).", nil, nil)
	gwOpenDesc     = prometheus.NewDesc("hindsight_gateway_open_sessions", "Gateway sessions open now.", nil, nil)
	gwStepDesc     = prometheus.NewDesc("hindsight_gateway_policy_step", "Step of the checkpoint the gateway serves (0: the initial model).", nil, nil)
	gwFeedbackDesc = prometheus.NewDesc("hindsight_gateway_feedback_records",
		"Follow-up records of feedback on written sessions, by state: joined (trained with the rollout), late (after it was taken; never trained), pending.",
		[]string{"state"}, nil)
	gwHeldDesc       = prometheus.NewDesc("hindsight_gateway_held_sessions", "Closed gateway sessions waiting out gateway.feedback_window before they are written to the spool.", nil, nil)
	gwHeldBytesDesc  = prometheus.NewDesc("hindsight_gateway_held_bytes", "Bytes of the held sessions' journals (bounded by gateway.feedback_window_max_bytes).", nil, nil)
	gwHeldEarlyDesc  = prometheus.NewDesc("hindsight_gateway_held_written_early_total", "Held sessions written before their feedback window ended, to keep the held bytes under the bound (this process).", nil, nil)
	gwUnusableDesc   = prometheus.NewDesc("hindsight_gateway_comments_unusable_total", "Comments the feedback API took and answered as unusable: too long for a hint, or no room in the rollout's selections (this process).", nil, nil)
	hookAttemptsDesc = prometheus.NewDesc("hindsight_engine_hook_attempts", "Calls an engine hook made for the newest checkpoint.", []string{"kind", "url"}, nil)
	hookStepDesc     = prometheus.NewDesc("hindsight_engine_hook_last_step", "Step of the last checkpoint the engine accepted (0: none).", []string{"kind", "url"}, nil)
	hookFailingDesc  = prometheus.NewDesc("hindsight_engine_hook_failing", "1 while the engine hook's last call failed.", []string{"kind", "url"}, nil)
)

func (c gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{gwRequestsDesc, gwErrorsDesc, gwTurnsDesc, gwRecordedDesc, gwOpenDesc, gwStepDesc, gwFeedbackDesc,
		gwHeldDesc, gwHeldBytesDesc, gwHeldEarlyDesc, gwUnusableDesc, hookAttemptsDesc, hookStepDesc, hookFailingDesc} {
		ch <- d
	}
}

func (c gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.snapshot()
	if g := st.GetGateway(); g != nil {
		ctr, gauge := prometheus.CounterValue, prometheus.GaugeValue
		ch <- prometheus.MustNewConstMetric(gwRequestsDesc, ctr, float64(g.GetRequests()))
		ch <- prometheus.MustNewConstMetric(gwErrorsDesc, ctr, float64(g.GetErrors()))
		ch <- prometheus.MustNewConstMetric(gwTurnsDesc, ctr, float64(g.GetTurns()))
		ch <- prometheus.MustNewConstMetric(gwRecordedDesc, ctr, float64(g.GetRolloutsRecorded()))
		ch <- prometheus.MustNewConstMetric(gwOpenDesc, gauge, float64(g.GetOpenSessions()))
		ch <- prometheus.MustNewConstMetric(gwStepDesc, gauge, float64(g.GetPolicyStep()))
		ch <- prometheus.MustNewConstMetric(gwFeedbackDesc, gauge, float64(g.GetFeedbackJoined()), "joined")
		ch <- prometheus.MustNewConstMetric(gwFeedbackDesc, gauge, float64(g.GetFeedbackLate()), "late")
		ch <- prometheus.MustNewConstMetric(gwFeedbackDesc, gauge, float64(g.GetFeedbackPending()), "pending")
		ch <- prometheus.MustNewConstMetric(gwHeldDesc, gauge, float64(g.GetHeldSessions()))
		ch <- prometheus.MustNewConstMetric(gwHeldBytesDesc, gauge, float64(g.GetHeldBytes()))
		ch <- prometheus.MustNewConstMetric(gwHeldEarlyDesc, ctr, float64(g.GetHeldWrittenEarly()))
		ch <- prometheus.MustNewConstMetric(gwUnusableDesc, ctr, float64(g.GetCommentsUnusable()))
	}
	for _, h := range st.GetEngineHooks() {
		failing := 0.0
		if h.GetLastError() != "" {
			failing = 1
		}
		ch <- prometheus.MustNewConstMetric(hookAttemptsDesc, prometheus.GaugeValue, float64(h.GetAttempts()), h.GetKind(), h.GetUrl())
		ch <- prometheus.MustNewConstMetric(hookStepDesc, prometheus.GaugeValue, float64(h.GetLastStep()), h.GetKind(), h.GetUrl())
		ch <- prometheus.MustNewConstMetric(hookFailingDesc, prometheus.GaugeValue, failing, h.GetKind(), h.GetUrl())
	}
}

func (m *metrics) fileDone(rep *rollout.FileReport) {
	m.files.WithLabelValues(rep.Outcome).Inc()
	m.rollouts.WithLabelValues("accepted").Add(float64(rep.Accepted))
	m.rollouts.WithLabelValues("rejected").Add(float64(rep.Rejected))
	m.tokens.Add(float64(rep.Tokens))
	seen := map[int]bool{}
	for _, p := range rep.Problems {
		if !seen[p.Row] { // count each rejected row once, by its first problem
			seen[p.Row] = true
			m.rejected.WithLabelValues(string(p.Code)).Inc()
		}
	}
}
