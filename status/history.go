package status

import (
	"sync"
	"time"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
)

// HistorySize is how many status points the daemon's history ring keeps: at one
// publish a second, about ten minutes.
const HistorySize = 600

// historyMinGap is the least time between two kept points; a publish sooner than
// that replaces the last point instead of adding one.
const historyMinGap = time.Second

// HistoryPoint is one sample of the status for the status page's charts. Fields that
// do not apply yet (no training, no eval) are zero or empty.
type HistoryPoint struct {
	At    time.Time `json:"at"`
	State string    `json:"state"`
	// Spool and training queues.
	Incoming   int64 `json:"incoming"`
	Processing int64 `json:"processing"`
	QueueFiles int64 `json:"queue_files"`
	QueueRoll  int64 `json:"queue_rollouts"`
	// Ingest and training.
	IngestTokensPerSecond float64 `json:"ingest_tokens_per_second"`
	Step                  int64   `json:"step"`
	Loss                  float64 `json:"loss"`
	// LossOut and LossDistill are the last step's two loss terms; the two terms'
	// gradient norms are there only with train.term_grad_norms.
	LossOut              float64  `json:"loss_out"`
	LossDistill          float64  `json:"loss_distill"`
	GradNormOut          *float64 `json:"grad_norm_out,omitempty"`
	GradNormDistill      *float64 `json:"grad_norm_distill,omitempty"`
	TrainTokensPerSecond float64  `json:"train_tokens_per_second"`
	ClipFraction         float64  `json:"clip_fraction"`
	PivotShare           float64  `json:"pivot_share"`
	// Teacher: mean latency of a teaching call and failures so far (all kinds).
	TeacherLatencyMs float64 `json:"teacher_latency_ms"`
	TeacherFailures  int64   `json:"teacher_failures"`
	RolloutsFailed   int64   `json:"rollouts_failed"`
	// Evals is the primary metric of each suite's latest complete eval, by suite.
	Evals map[string]float64 `json:"evals,omitempty"`
}

// Sample is the history point of st, taken now.
func Sample(st *hindsightv1.Status) HistoryPoint {
	p := HistoryPoint{At: time.Now().UTC(), State: st.GetState().String()}
	p.Incoming, p.Processing = st.GetSpool().GetIncoming(), st.GetSpool().GetProcessing()
	p.QueueFiles, p.QueueRoll = st.GetQueues().GetFiles(), st.GetQueues().GetRollouts()
	p.IngestTokensPerSecond = st.GetSession().GetTokensPerSecond()
	if tr := st.GetTraining(); tr != nil {
		p.Step, p.Loss, p.TrainTokensPerSecond, p.RolloutsFailed = tr.Step, tr.Loss, tr.TrainTokensPerSecond, tr.RolloutsFailed
		p.LossOut, p.LossDistill = tr.LossOut, tr.LossDistill
		if tr.GradNormOut != nil {
			p.GradNormOut, p.GradNormDistill = new(tr.GetGradNormOut()), new(tr.GetGradNormDistill())
		}
	}
	p.ClipFraction, p.PivotShare = st.GetCredit().GetClipFraction(), st.GetCredit().GetPivotShare()
	if te := st.GetTeacher(); te != nil {
		if te.MeanLatency != nil {
			p.TeacherLatencyMs = float64(te.MeanLatency.AsDuration()) / float64(time.Millisecond)
		}
		for _, n := range te.FailuresByKind {
			p.TeacherFailures += n
		}
	}
	for _, e := range st.GetEvals() {
		if e.Error != "" || e.Primary == "" {
			continue
		}
		if v, ok := e.Metrics[e.Primary]; ok {
			if p.Evals == nil {
				p.Evals = map[string]float64{}
			}
			p.Evals[e.Suite] = v
		}
	}
	return p
}

// History is a bounded ring of status points, oldest dropped first, that the status
// page charts (Pages.History is its Points); safe for concurrent use.
type History struct {
	mu   sync.Mutex
	pts  []HistoryPoint // ring storage, len ≤ size
	next int            // where the next point goes once the ring is full
	size int
}

// NewHistory returns an empty ring of size points.
func NewHistory(size int) *History { return &History{size: size} }

// Add appends p, or replaces the newest point when it is less than historyMinGap old.
func (h *History) Add(p HistoryPoint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.pts); n > 0 {
		last := (h.next - 1 + n) % n
		if len(h.pts) < h.size {
			last = n - 1
		}
		if p.At.Sub(h.pts[last].At) < historyMinGap {
			h.pts[last] = p
			return
		}
	}
	if len(h.pts) < h.size {
		h.pts = append(h.pts, p)
		return
	}
	h.pts[h.next] = p
	h.next = (h.next + 1) % h.size
}

// Points returns a copy of the points, oldest first.
func (h *History) Points() []HistoryPoint {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HistoryPoint, 0, len(h.pts))
	if len(h.pts) < h.size {
		return append(out, h.pts...)
	}
	out = append(out, h.pts[h.next:]...)
	return append(out, h.pts[:h.next]...)
}
