package daemon

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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

func newMetrics(reg *prometheus.Registry, s *stats, version string) *metrics {
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
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
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
