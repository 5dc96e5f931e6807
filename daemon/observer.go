package daemon

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/ledger"
	"github.com/hindsight-ai/hindsight/teacher"
	"github.com/hindsight-ai/hindsight/xla"
)

// observer is the device loop's train.Observer: it records what the loop does in
// the status and metrics, and passes steps and trained files on to Events.
type observer struct {
	stats     *stats
	metrics   *metrics
	heartbeat func()
	events    Events
	log       zerolog.Logger
	q         *queues
	budget    int // train.token_budget, reported with the totals
}

func (o *observer) Heartbeat()                    { o.heartbeat() }
func (o *observer) Batch(rollouts, tokens int)    { o.stats.setBatch(rollouts, tokens) }
func (o *observer) Hints(hs []teacher.Hint)       { o.stats.hintsTrained(hs) }
func (o *observer) Skipped()                      { o.stats.skipped() }
func (o *observer) Failed(err error, file string) { o.stats.failed(err, file) }

func (o *observer) Stepped(met xla.Metrics, stepped int64) {
	o.stats.stepDone(met, met.ScoredTokens, met.ScoreTook)
	o.events.Stepped(met, stepped)
}

func (o *observer) Checkpointed(step int64, dir string, at time.Time, trained, updates int64) {
	o.stats.setCheckpoint(step, dir, at)
	o.stats.trainedTotal(trained, step, updates, o.budget)
}

func (o *observer) Awaiting(n int64) {
	o.stats.setQueues(int64(len(o.q.files)), int64(len(o.q.ordered))+o.q.inTeach.Load(), n)
}

// FileDone records a file that left processing/ after training.
func (o *observer) FileDone(f ledger.Finished) {
	rep := f.Report
	o.stats.fileDone(rep, 0)
	o.metrics.fileDone(rep)
	o.stats.creditFile()
	o.log.Info().Uint64("seq", rep.Seq).Str("file", rep.Claimed).Int("rollouts", f.Rows).Str("credit_file", f.CreditFile).
		Str("outcome", rep.Outcome).Msg("file trained")
	o.events.FileTrained(rep, f.Rows, f.CreditFile)
	o.stats.publish()
}
