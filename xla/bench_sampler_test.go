package xla

import (
	"syscall"
	"testing"
	"time"
)

// cpuSeconds is the CPU time the process has used.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// BenchmarkPrefillVsScore measures the sampler's prefill of one long prompt
// (Generate with MaxNew 1: the prefill and one decode step) against the scorer's
// pass over the same tokens on the same model and backend, in the same run, and
// reports both in tokens/s and their ratio, by the wall and by CPU seconds
// (docs/performance.md "Sampler prefill against the scorer").
//
//	go test ./xla -run '^$' -bench PrefillVsScore -benchtime 3x
func BenchmarkPrefillVsScore(b *testing.B) {
	for _, n := range []int{2048} {
		m := testModel(b, tinyFields(map[string]any{"max_position_embeddings": 131072}), 1)
		backend := newTestBackend(b)
		s, err := NewSampler(backend, m, 0)
		if err != nil {
			b.Fatal(err)
		}
		sc, err := NewScorer(backend, m, ScorerOptions{})
		if err != nil {
			b.Fatal(err)
		}
		prompt := testTokens(n, m.Config.VocabSize, 1)
		// Warm: compile both programs once.
		if _, err := s.Generate(b.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 1}); err != nil {
			b.Fatal(err)
		}
		_, c, err := sc.Score(b.Context(), prompt)
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		var prefill, score, prefillCPU, scoreCPU float64
		b.ResetTimer()
		for range b.N {
			t0, c0 := time.Now(), cpuSeconds()
			if _, err := s.Generate(b.Context(), [][]int32{prompt}, SampleOptions{MaxNew: 1}); err != nil {
				b.Fatal(err)
			}
			t1, c1 := time.Now(), cpuSeconds()
			_, c, err := sc.Score(b.Context(), prompt)
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
			prefill += t1.Sub(t0).Seconds()
			score += time.Since(t1).Seconds()
			prefillCPU += c1 - c0
			scoreCPU += cpuSeconds() - c1
		}
		b.ReportMetric(float64(n*b.N)/prefill, "prefill-tokens/s")
		b.ReportMetric(float64(n*b.N)/score, "score-tokens/s")
		b.ReportMetric(score/prefill, "prefill/score")
		// On a shared machine the process's CPU seconds are steadier than the wall.
		b.ReportMetric(scoreCPU/prefillCPU, "prefill/score-cpu")
	}
}
