package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/internal/arrowtest"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestTemperatureCreditFiles runs the real daemon on two spool files: one with the
// temperature column (0.7, 1.5, greedy 0, and a bad −1) and one written before the
// column existed. The bad row is rejected with a reason naming the file, row, column
// and value; every other rollout's credit row records the temperature it was scored
// at, and its student and teacher log-probs equal the reference scorer's at that
// temperature (the weights before the row's step, on the same backend; the scorer's
// tempered log-probs are held to credit's float64 reference by xla's
// TestScoreTemperature): 0.7 and 1.5 as written, 1 for greedy and for the file
// without the column.
func TestTemperatureCreditFiles(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	_, stderr, code := runCLI(t, "init-model", "-out", model, "-preset", "tiny", "-tokenizer", "bytes")
	require.Equal(t, 0, code, stderr)
	data := filepath.Join(dir, "data")
	incoming := filepath.Join(data, "spool", "incoming")
	require.NoError(t, os.MkdirAll(incoming, 0o755))

	opts := rollout.SynthOptions{Tokens: 256, Seed: 5, IDPrefix: "temp"}
	var withCol []*rollout.Rollout
	want := map[string]float32{}
	for i, T := range []float32{0.7, 1.5, 0, -1} {
		r := rollout.Synthesize(opts, i)
		r.Temperature, r.HasTemperature = T, true
		withCol = append(withCol, r)
		want[r.ID] = float32(r.ScoringTemperature())
	}
	require.NoError(t, rollout.WriteFile(filepath.Join(incoming, "a.arrow"), withCol, rollout.WriteOptions{}))
	opts.IDPrefix = "old"
	var old []*rollout.Rollout
	for i := range 2 {
		r := rollout.Synthesize(opts, i)
		old = append(old, r)
		want[r.ID] = 1
	}
	writeWithoutTemperature(t, filepath.Join(incoming, "b.arrow"), old)
	delete(want, "temp-000003") // the bad row

	p, addr := startConfigured(t, data, "backend: go\nmodel:\n  dir: "+model+"\n"+
		"train:\n  token_budget: 256\n  idle_flush: 500ms\n  seed: 7\n  teacher_model:\n    mode: live\n"+
		"  optimizer:\n    lr: 0.001\n    warmup_steps: 1\n  checkpoint:\n    every_steps: 1\n    keep: 100\n")
	waitTrained(t, p, addr, int64(len(want)))
	p.stop(t, 60*time.Second)

	var reasons []byte
	for _, n := range listDir(t, filepath.Join(data, "spool", "failed")) {
		if filepath.Ext(n) == rollout.ErrorSuffix {
			b, err := os.ReadFile(filepath.Join(data, "spool", "failed", n))
			require.NoError(t, err)
			reasons = append(reasons, b...)
		}
	}
	require.Contains(t, string(reasons), `a.arrow: row 3 (rollout_id "temp-000003"): column temperature: E_TEMPERATURE: temperature is -1; want a finite value ≥ 0 (0: greedy)`)

	backend, err := xla.NewBackend("go")
	require.NoError(t, err)
	scorers := map[int64]*xla.Scorer{} // by the step whose weights they hold
	scorerAt := func(step int64) *xla.Scorer {
		if s, ok := scorers[step]; ok {
			return s
		}
		path := model
		if step > 0 {
			path = filepath.Join(data, "checkpoints", checkpoint.StepDirName(step))
		}
		m, err := xla.Open(path, xla.OpenOptions{Precision: xla.PrecisionF32})
		require.NoError(t, err, "the weights of step %d", step)
		s, err := xla.NewScorer(backend, m, xla.ScorerOptions{})
		require.NoError(t, err)
		scorers[step] = s
		return s
	}
	got := map[string]float32{}
	hints, far := 0, 0.0
	for _, n := range listDir(t, filepath.Join(data, "outputs")) {
		rows, err := creditfile.Read(filepath.Join(data, "outputs", n))
		require.NoError(t, err)
		for _, r := range rows {
			got[r.RolloutID] = r.Temperature
			T := float64(r.Temperature)
			s := scorerAt(r.Step - 1) // the row's log-probs are at the weights before its step
			lp, cache, err := s.ScoreAt(t.Context(), r.Tokens, T)
			require.NoError(t, err)
			plain, c1, err := s.Score(t.Context(), r.Tokens)
			require.NoError(t, err)
			c1.Close()
			for i := 1; i < len(lp); i++ {
				require.InDelta(t, lp[i], r.Student[i], 1e-5, "%s: student_logprobs[%d] at T=%g", r.RolloutID, i, T)
				far = max(far, math.Abs(float64(lp[i]-plain[i])))
			}
			for k, h := range r.Hints {
				hints++
				span := []credit.Hint{{InsertAt: int(h.InsertAt), End: int(h.End), Tokens: h.Tokens}}
				q, _, err := s.ScoreHintedAt(t.Context(), r.Tokens, cache, span, xla.TeacherView{}, nil, T)
				require.NoError(t, err)
				for i, v := range q[0] {
					require.InDelta(t, v, h.TeacherLogProbs[i], 1e-5, "%s hint %d: teacher_logprobs[%d] at T=%g", r.RolloutID, k, i, T)
				}
			}
			cache.Close()
		}
	}
	require.Equal(t, want, got, "each trained rollout's credit row records the temperature it was scored at")
	require.Positive(t, hints, "the rules teacher hinted the synthetic tool errors")
	require.Greater(t, far, 0.05, "scoring at 0.7 and 1.5 moved the log-probs from temperature 1's")
	t.Logf("%d hints; largest |log π_T − log π_1| over the rows: %.3g nats", hints, far)
}

// writeWithoutTemperature writes rs as a rollout file of the schema before the
// temperature column (every other column as the writer writes it).
func writeWithoutTemperature(t *testing.T, path string, rs []*rollout.Rollout) {
	t.Helper()
	stream := filepath.Join(t.TempDir(), "with-temperature.arrow")
	require.NoError(t, rollout.WriteFile(stream, rs, rollout.WriteOptions{Format: rollout.FormatStream, BatchRows: len(rs)}))
	in, err := os.Open(stream)
	require.NoError(t, err)
	defer in.Close()
	rec := arrowtest.StreamRecord(t, in)
	defer rec.Release()
	old := arrowtest.WithoutColumn(rec, rollout.ColTemperature)
	defer old.Release()
	f, err := os.Create(path)
	require.NoError(t, err)
	fw, err := ipc.NewFileWriter(f, ipc.WithSchema(old.Schema()))
	require.NoError(t, err)
	require.NoError(t, fw.Write(old))
	require.NoError(t, fw.Close())
	require.NoError(t, f.Close())
}
