package daemon

import (
	"context"
	"math"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/eval"
	"github.com/hindsight-ai/hindsight/train"
	"github.com/hindsight-ai/hindsight/xla"
)

// EvalsPath returns <data_dir>/evals.jsonl, where checkpoint evals are recorded.
func (c *Config) EvalsPath() string { return filepath.Join(c.DataDir, "evals.jsonl") }

// evalGrace is how long a shutdown waits for command evals still running, at most:
// never past the work context's end (graceLeft), so a stop ends within
// shutdown_timeout.
const evalGrace = 10 * time.Second

// evaluator runs the configured eval suites after each checkpoint, on the device
// goroutine (train.Options.AfterCheckpoint). It owns evals.jsonl.
type evaluator struct {
	rec     *eval.Recorder
	runner  *eval.Runner
	sampler *xla.Sampler // built on the trainer's model at the first eval
}

// openEvals opens evals.jsonl and the runner when suites are configured; status shows
// the results already recorded (from before a restart) at once. The returned close
// waits for command suites still running.
func (d *daemon) openEvals() (close func(), err error) {
	if len(d.cfg.Eval.Suites) == 0 {
		return func() {}, nil
	}
	rec, err := eval.OpenRecorder(d.cfg.EvalsPath())
	if err != nil {
		return nil, err
	}
	d.stats.evals = func() (latest, best []eval.Result) { return rec.Latest(), rec.Best() }
	d.eval = &evaluator{rec: rec, runner: eval.NewRunner(d.cfg.Eval, rec, eval.RunnerOptions{
		Log: d.opts.Log, ReadOptions: d.readOpts, OnResult: func(eval.Result) { d.stats.publish() }})}
	return func() {
		d.eval.runner.Close(d.graceLeft(evalGrace))
		if err := rec.Close(); err != nil {
			d.log.Error().Err(err).Msg("close evals.jsonl")
		}
	}, nil
}

// evalCheckpoint is the device loop's AfterCheckpoint: the checkpoint's evals. A
// failing eval is recorded and logged, never returned.
func (d *daemon) evalCheckpoint(ctx context.Context, c train.Checkpoint) error {
	if d.eval == nil {
		return nil
	}
	ev := d.eval
	if ev.sampler == nil {
		s, err := xla.NewSampler(c.Trainer.Backend(), c.Trainer.Model(), 0)
		if err != nil {
			d.log.Warn().Err(err).Msg("no sampler for toolworld evals")
		}
		ev.sampler = s
	}
	ev.runner.Run(ctx, eval.Policy{Step: c.Step, Checkpoint: c.Dir, Scorer: c.Trainer.Scorer(), Sampler: ev.sampler,
		Tokenizer: d.tokenizer})
	return nil
}

// evalProtos converts eval results for the status.
func evalProtos(rs []eval.Result) []*hindsightv1.EvalResult {
	out := make([]*hindsightv1.EvalResult, len(rs))
	for i, r := range rs {
		out[i] = &hindsightv1.EvalResult{Suite: r.Suite, Kind: r.Kind, Step: r.Step, Checkpoint: r.Checkpoint,
			At: timestamppb.New(r.Time), Metrics: r.Metrics, Primary: r.Primary, Complete: r.Complete,
			TookSeconds: r.Took, Error: r.Error}
	}
	return out
}

// evalCollector serves the latest eval of each suite from the published status:
// hindsight_eval{suite,metric}, hindsight_eval_step{suite}, hindsight_eval_failed{suite}
// and hindsight_eval_primary{suite}; and the best so far (hindsight_eval_best_primary,
// hindsight_eval_best_step), which the eval regression alert compares it with.
type evalCollector struct{ s *stats }

var (
	evalDesc = prometheus.NewDesc("hindsight_eval",
		"Latest checkpoint eval of each suite, by metric (success, mean_reward, tool_error_rate, mean_logprob, …).",
		[]string{"suite", "metric"}, nil)
	evalStepDesc = prometheus.NewDesc("hindsight_eval_step",
		"Step of the checkpoint the suite's latest eval measured.", []string{"suite"}, nil)
	evalFailedDesc = prometheus.NewDesc("hindsight_eval_failed",
		"1 when the suite's latest eval failed (its error is in status and evals.jsonl), else 0.", []string{"suite"}, nil)
	evalPrimaryDesc = prometheus.NewDesc("hindsight_eval_primary",
		"The suite's primary metric (higher is better) in its latest eval; absent while that eval failed.", []string{"suite"}, nil)
	evalBestDesc = prometheus.NewDesc("hindsight_eval_best_primary",
		"The suite's best primary metric over every checkpoint evaluated (evals.jsonl, across restarts).", []string{"suite"}, nil)
	evalBestStepDesc = prometheus.NewDesc("hindsight_eval_best_step",
		"Step of the checkpoint with the suite's best primary metric.", []string{"suite"}, nil)
)

func (c evalCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- evalDesc
	ch <- evalStepDesc
	ch <- evalFailedDesc
	ch <- evalPrimaryDesc
	ch <- evalBestDesc
	ch <- evalBestStepDesc
}

func (c evalCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.snapshot()
	if st == nil {
		return
	}
	for _, e := range st.Evals {
		failed := 0.0
		if e.Error != "" {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(evalStepDesc, prometheus.GaugeValue, float64(e.Step), e.Suite)
		ch <- prometheus.MustNewConstMetric(evalFailedDesc, prometheus.GaugeValue, failed, e.Suite)
		for k, v := range e.Metrics {
			ch <- prometheus.MustNewConstMetric(evalDesc, prometheus.GaugeValue, v, e.Suite, k)
		}
		if v, ok := primaryOf(e); ok {
			ch <- prometheus.MustNewConstMetric(evalPrimaryDesc, prometheus.GaugeValue, v, e.Suite)
		}
	}
	for _, e := range st.BestEvals {
		if v, ok := primaryOf(e); ok {
			ch <- prometheus.MustNewConstMetric(evalBestDesc, prometheus.GaugeValue, v, e.Suite)
			ch <- prometheus.MustNewConstMetric(evalBestStepDesc, prometheus.GaugeValue, float64(e.Step), e.Suite)
		}
	}
}

// primaryOf is eval.Result.Score for the status's copy of a result.
func primaryOf(e *hindsightv1.EvalResult) (float64, bool) {
	if e.GetError() != "" {
		return 0, false
	}
	v, ok := e.GetMetrics()[e.GetPrimary()]
	return v, ok && !math.IsNaN(v)
}
