package xla

import (
	"fmt"
	"testing"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
)

// BenchmarkScoreShortRollouts scores 8 rollouts of 256 tokens and 1 of 2,048 at the
// bench/score "small" preset shape (4 layers, d = 256, 8 heads, byte vocabulary),
// chunk 512, with the chunk ladder now (chunkRung) and the one before issue 42
// (QuarterChunks: 512 → 128 → 32) in the same process, alternating case by case,
// and reports tokens per CPU-second (the process's user + system time: the machine
// is shared) of each and their ratio (docs/performance.md "Short rollouts").
//
//	HINDSIGHT_TEST_BACKEND=xla-cpu go test -run '^$' -bench ScoreShortRollouts -benchtime 3x ./xla/
func BenchmarkScoreShortRollouts(b *testing.B) {
	m := testModel(b, tinyFields(map[string]any{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
		"num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 704}), 41)
	backend := newTestBackend(b)
	ladders := []string{"now", "quarter"}
	scorers := map[string]*Scorer{}
	for _, l := range ladders {
		s, err := NewScorer(backend, m, ScorerOptions{QuarterChunks: l == "quarter"})
		if err != nil {
			b.Fatal(err)
		}
		scorers[l] = s
	}
	shapes := []struct {
		name        string
		batch, size int
	}{{"8x256", 8, 256}, {"1x2048", 1, 2048}}
	rollouts := map[string][][]int32{}
	for _, sh := range shapes {
		for i := range sh.batch {
			rollouts[sh.name] = append(rollouts[sh.name], testTokens(sh.size, m.Config.VocabSize, uint64(42+i)))
		}
	}
	pass := func(s *Scorer, rs [][]int32) (cpu time.Duration) {
		c0 := cpuTime()
		for _, r := range rs {
			_, c, err := s.Score(b.Context(), r)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
		return cpuTime() - c0
	}
	// Warm: compile every program once.
	for _, l := range ladders {
		for _, sh := range shapes {
			pass(scorers[l], rollouts[sh.name])
		}
	}
	cpu := map[string]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for _, sh := range shapes {
			for _, l := range ladders {
				cpu[sh.name+"/"+l] += pass(scorers[l], rollouts[sh.name])
			}
		}
	}
	b.StopTimer()
	for _, sh := range shapes {
		tokens := float64(sh.batch * sh.size * b.N)
		now, old := tokens/cpu[sh.name+"/now"].Seconds(), tokens/cpu[sh.name+"/quarter"].Seconds()
		b.ReportMetric(now, sh.name+"-tokens/cpu-s")
		b.ReportMetric(old, sh.name+"-quarter-tokens/cpu-s")
		b.ReportMetric(now/old, sh.name+"-now/quarter")
	}
	for _, l := range ladders {
		st := scorers[l].Stats()
		b.Logf("%s ladder: %s", l, fmt.Sprint(st))
	}
}

// BenchmarkTrainShortRollouts is BenchmarkScoreShortRollouts for whole optimizer
// steps of 8 rollouts of 256 tokens (the step's scoring pass and its gradient
// chunks take the ladder), both ladders in one process, alternating.
//
//	HINDSIGHT_TEST_BACKEND=xla-cpu go test -run '^$' -bench TrainShortRollouts -benchtime 2x ./xla/
func BenchmarkTrainShortRollouts(b *testing.B) {
	m := testModel(b, tinyFields(map[string]any{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8,
		"num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 704}), 43)
	backend := newTestBackend(b)
	const batch, T = 8, 256
	var rs []credit.Sequence
	for i := range batch {
		r := credit.Sequence{ID: fmt.Sprint(i), Tokens: testTokens(T, m.Config.VocabSize, uint64(44+i)), Sampler: make([]float64, T),
			Trainable: make([]bool, T), Reward: float64(i%2) - 0.5, HasReward: true}
		for t := range T {
			r.Trainable[t], r.Sampler[t] = t > 0, -2
		}
		rs = append(rs, r)
	}
	ladders := []string{"now", "quarter"}
	trainers := map[string]*Trainer{}
	for _, l := range ladders {
		tr, err := NewTrainer(backend, m, TrainerOptions{Scorer: ScorerOptions{QuarterChunks: l == "quarter"}})
		if err != nil {
			b.Fatal(err)
		}
		trainers[l] = tr
	}
	step := func(tr *Trainer) time.Duration {
		c0 := cpuTime()
		if _, err := tr.Step(b.Context(), rs); err != nil {
			b.Fatal(err)
		}
		return cpuTime() - c0
	}
	for _, l := range ladders { // warm: compile
		step(trainers[l])
	}
	cpu := map[string]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for _, l := range ladders {
			cpu[l] += step(trainers[l])
		}
	}
	b.StopTimer()
	tokens := float64(batch * T * b.N)
	now, old := tokens/cpu["now"].Seconds(), tokens/cpu["quarter"].Seconds()
	b.ReportMetric(now, "8x256-tokens/cpu-s")
	b.ReportMetric(old, "8x256-quarter-tokens/cpu-s")
	b.ReportMetric(now/old, "8x256-now/quarter")
}
