package xla

import (
	"testing"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/stretchr/testify/require"
)

// TestStepWithoutSignal: a batch with no hint and no reward is a step without an
// update: weights, moments and teacher stay bit for bit, the step and the rollouts
// are counted, the learning-rate schedule does not move. A run with such a step
// then ends with the weights of a run without it, and a checkpoint keeps the two
// counts apart.
func TestStepWithoutSignal(t *testing.T) {
	backend := newTestBackend(t)
	dir := tinyModelDir(t)
	opts := resumeOptions(nil)
	opts.Credit.KLBeta = 0
	newTrainer := func(src string) *Trainer {
		m, err := Open(src, OpenOptions{})
		require.NoError(t, err)
		tr, err := NewTrainer(backend, m, opts)
		require.NoError(t, err)
		return tr
	}
	pool := rolloutPool(4, 21)
	silent := []credit.Sequence{pool[0], pool[1]}
	for i := range silent {
		silent[i].ID, silent[i].Hints, silent[i].HasReward = "silent"+silent[i].ID, nil, false
	}
	signal := []credit.Sequence{pool[2], pool[3]}

	tr := newTrainer(dir)
	w0, m0, t0 := weightsOf(tr.model), momentsOf(tr), weightsOf(tr.teacher.model)
	met, err := tr.Step(t.Context(), silent)
	require.NoError(t, err)
	require.False(t, met.Updated)
	require.EqualValues(t, 1, met.Step)
	require.EqualValues(t, 1, tr.StepCount())
	require.EqualValues(t, 0, tr.UpdateCount())
	require.Equal(t, opts.Optimizer.LRAt(0), met.LR)
	require.Equal(t, w0, weightsOf(tr.model), "weights")
	require.Equal(t, m0, momentsOf(tr), "moments")
	require.Equal(t, t0, weightsOf(tr.teacher.model), "teacher")

	met, err = tr.Step(t.Context(), signal)
	require.NoError(t, err)
	require.True(t, met.Updated)
	require.Equal(t, opts.Optimizer.LRAt(0), met.LR, "the silent step did not advance warm-up")
	require.EqualValues(t, 2, tr.StepCount())
	require.EqualValues(t, 1, tr.UpdateCount())

	only := newTrainer(dir)
	_, err = only.Step(t.Context(), signal)
	require.NoError(t, err)
	require.Equal(t, weightsOf(only.model), weightsOf(tr.model), "a silent step changes nothing")
	require.Equal(t, momentsOf(only), momentsOf(tr))

	// A checkpoint keeps both counters (the trained list and count are the
	// ledger's: the caller's state carries them through).
	files, err := checkpoint.ModelFiles(dir)
	require.NoError(t, err)
	ck, err := tr.SaveCheckpoint(t.TempDir(), files, checkpoint.TrainerState{Trained: []string{signal[0].ID}, TrainedTotal: 4}, 1)
	require.NoError(t, err)
	back := newTrainer(ck)
	st, err := back.Restore(ck)
	require.NoError(t, err)
	require.EqualValues(t, 2, st.Step)
	require.EqualValues(t, 4, st.TrainedTotal)
	require.Equal(t, []string{signal[0].ID}, st.Trained)
	require.EqualValues(t, 2, back.StepCount())
	require.EqualValues(t, 1, back.UpdateCount())
}
