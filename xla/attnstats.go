package xla

// trainCut is how many cache positions a training chunk whose last position is
// end-1 attends to: the chunk gets the cache cut to them. The span of
// spanFor(end, unit) (unit: the training chunk), or with BucketAttention the
// capacity bucket ≥ end. The training graph attends over the cut in one masked
// softmax, since its backward keeps the probabilities anyway (there is no
// recompute backward here): chunk × heads × cut floats, which the trainer's
// AttentionScores budget bounds by halving the chunk.
func (s *Scorer) trainCut(end, unit int) int {
	if s.bucket {
		return s.capacityFor(end)
	}
	return spanFor(end, unit).Len()
}

// count adds one chunk execution to the gradient pass's stats.
func (p *gradPass) count(n, cut int) {
	p.stats.Steps++
	p.stats.AttendedPairs += int64(n) * int64(cut)
	if key := [2]int{n, cut}; !p.seen[key] {
		p.seen[key] = true
		p.stats.Programs++
	}
}

// GradientStats counts the gradient passes' chunk executions against a KV cache
// (truncated and exact backprop) since the Trainer was made: AttendedPairs sums
// chunk × cache positions attended; Programs counts distinct (chunk, cut) shapes
// (each mode compiles its own). For benchmarks.
func (tr *Trainer) GradientStats() AttentionStats { return tr.grad.stats }
