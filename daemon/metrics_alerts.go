package daemon

import (
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// The series below exist for the alerting rules in deploy/prometheus/ (docs/running.md
// "Alerts"): each answers one question a rule asks, from the published status or a
// statfs at scrape time, so scraping never touches the pipeline.

var (
	progressDesc = prometheus.NewDesc("hindsight_train_progress_timestamp_seconds",
		"Unix time of this process's last training step, or of its start before its first step: time() minus it is how long training has not moved. Only with training.",
		nil, nil)
	queueFilesDesc = prometheus.NewDesc("hindsight_queue_files",
		"Claimed files waiting for the reader. Only with training.", nil, nil)
	queueAwaitingDesc = prometheus.NewDesc("hindsight_queue_files_awaiting_checkpoint",
		"Files whose rollouts are trained and that wait for a durable checkpoint. Only with training.", nil, nil)
	pausedDesc = prometheus.NewDesc("hindsight_paused",
		"1 while claiming and stepping are paused for the cause (operator: hindsight pause; disk_full: a write failed with ENOSPC or EDQUOT and is retried), else 0.",
		[]string{"cause"}, nil)
	teacherSelectionsDesc = prometheus.NewDesc("hindsight_teacher_selections_total",
		"Segments selected for a hint (this process). Only with training.", nil, nil)
	teacherFailuresDesc = prometheus.NewDesc("hindsight_teacher_failures_total",
		"Selections left without a hint because a teacher failed, all kinds (this process; status has them by kind). Only with training.", nil, nil)
	teacherCommentsDroppedDesc = prometheus.NewDesc("hindsight_teacher_comments_dropped_total",
		"A person's comments that gave no hint, by reason: too_long (over teacher.max_hint_tokens), overlap (a selection already covers the turn), max_per_rollout, no_feedback_rule (this process). Only with training.",
		[]string{"reason"}, nil)
	teacherRequestsDesc = prometheus.NewDesc("hindsight_teacher_requests_total",
		"Requests sent to the LLM teacher's server, retries included (this process). Only with training.", nil, nil)
	teacherBreakerDesc = prometheus.NewDesc("hindsight_teacher_breaker_open",
		"1 while the LLM teacher's circuit breaker is open (requests refused), else 0. Only with training.", nil, nil)
	diskAvailDesc = prometheus.NewDesc("hindsight_disk_available_bytes",
		"Bytes an unprivileged writer may still use on the file system of each directory the daemon writes (data_dir, spool.dir, output_dir; one path per file system).",
		[]string{"path"}, nil)
	diskSizeDesc = prometheus.NewDesc("hindsight_disk_size_bytes",
		"Size of the file system of each directory the daemon writes, bytes.", []string{"path"}, nil)
)

// alertCollector serves the series the alerting rules read that no other collector
// has: training progress, pauses, the teacher's failure counters and free disk.
type alertCollector struct {
	s *stats
	// dirs are the directories the daemon writes; the first of each file system
	// names it.
	dirs []string
}

func (c alertCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{progressDesc, queueFilesDesc, queueAwaitingDesc, pausedDesc,
		teacherSelectionsDesc, teacherFailuresDesc, teacherCommentsDroppedDesc, teacherRequestsDesc, teacherBreakerDesc, diskAvailDesc, diskSizeDesc} {
		ch <- d
	}
}

func (c alertCollector) Collect(ch chan<- prometheus.Metric) {
	g, ctr := prometheus.GaugeValue, prometheus.CounterValue
	c.collectDisk(ch)
	st := c.s.snapshot()
	if st == nil {
		return
	}
	p := st.GetPause()
	ch <- prometheus.MustNewConstMetric(pausedDesc, g, one(p.GetOperator()), "operator")
	ch <- prometheus.MustNewConstMetric(pausedDesc, g, one(p.GetDiskFull()), "disk_full")
	tr := st.GetTraining()
	if tr == nil {
		return
	}
	progress := st.GetStartedAt().AsTime()
	if tr.GetLastStepAt() != nil {
		progress = tr.GetLastStepAt().AsTime()
	}
	ch <- prometheus.MustNewConstMetric(progressDesc, g, float64(progress.UnixNano())/1e9)
	ch <- prometheus.MustNewConstMetric(queueFilesDesc, g, float64(st.GetQueues().GetFiles()))
	ch <- prometheus.MustNewConstMetric(queueAwaitingDesc, g, float64(st.GetQueues().GetFilesAwaitingCheckpoint()))
	te := st.GetTeacher()
	var failed int64
	for _, n := range te.GetFailuresByKind() {
		failed += n
	}
	ch <- prometheus.MustNewConstMetric(teacherSelectionsDesc, ctr, float64(te.GetSelections()))
	ch <- prometheus.MustNewConstMetric(teacherFailuresDesc, ctr, float64(failed))
	ch <- prometheus.MustNewConstMetric(teacherRequestsDesc, ctr, float64(te.GetRequests()))
	for reason, n := range te.GetCommentsDropped() {
		ch <- prometheus.MustNewConstMetric(teacherCommentsDroppedDesc, ctr, float64(n), reason)
	}
	ch <- prometheus.MustNewConstMetric(teacherBreakerDesc, g, one(te.GetBreakerState() == "open"))
}

// collectDisk statfs's each directory; a directory that does not exist yet (output_dir
// before the first credit file) or a second path on a file system already served is
// left out.
func (c alertCollector) collectDisk(ch chan<- prometheus.Metric) {
	seen := map[uint64]bool{}
	for _, dir := range c.dirs {
		var sfs unix.Statfs_t
		var sst unix.Stat_t
		if unix.Statfs(dir, &sfs) != nil || unix.Stat(dir, &sst) != nil || seen[uint64(sst.Dev)] {
			continue
		}
		seen[uint64(sst.Dev)] = true
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		bs := float64(sfs.Bsize)
		ch <- prometheus.MustNewConstMetric(diskAvailDesc, prometheus.GaugeValue, float64(sfs.Bavail)*bs, dir)
		ch <- prometheus.MustNewConstMetric(diskSizeDesc, prometheus.GaugeValue, float64(sfs.Blocks)*bs, dir)
	}
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
