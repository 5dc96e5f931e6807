package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

func TestScoreCmd(t *testing.T) {
	t.Setenv("GOMLX_BACKEND", "")
	dir := t.TempDir()
	modelDir := filepath.Join(dir, "model")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"init-model", "-out", modelDir, "-seed", "2"}, &stdout, &stderr), stderr.String())

	seqs := [][]int32{
		{tokenizer.BytesBOS, 'h', 'i', tokenizer.BytesEnd},
		{tokenizer.BytesBOS, 'o', 'k', ' ', 'g', 'o', tokenizer.BytesEOS, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
		{7},
	}
	var rs []*rollout.Rollout
	for i, s := range seqs {
		rs = append(rs, &rollout.Rollout{ID: string(rune('a' + i)), Tokens: s, LogProbs: make([]float32, len(s)), Tokenizer: tokenizer.BytesFingerprint})
	}
	in := filepath.Join(dir, "in.arrow")
	require.NoError(t, rollout.WriteFile(in, rs, rollout.WriteOptions{}))
	out := filepath.Join(dir, "scores.arrow")
	stdout.Reset()
	stderr.Reset()
	code := run(t.Context(), []string{"score", "-model", modelDir, "-in", in, "-out", out, "-chunk", "16"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "3 rollouts scored, 0 skipped, 32 tokens")
	require.Contains(t, stderr.String(), "tokens/s")

	// Reference: the same model through the package.
	m, err := xla.Open(modelDir, xla.OpenOptions{})
	require.NoError(t, err)
	b, err := xla.NewBackend(xla.DefaultBackend)
	require.NoError(t, err)
	s, err := xla.NewScorer(b, m, xla.ScorerOptions{Chunk: 16})
	require.NoError(t, err)

	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, 1, r.NumRecords())
	rec, err := r.Record(0)
	require.NoError(t, err)
	require.EqualValues(t, 3, rec.NumRows())
	ids := rec.Column(0).(*array.String)
	lists := rec.Column(1).(*array.LargeList)
	vals := lists.ListValues().(*array.Float32)
	for i, seq := range seqs {
		require.Equal(t, rs[i].ID, ids.Value(i))
		start, end := lists.ValueOffsets(i)
		require.EqualValues(t, len(seq), end-start)
		want, c, err := s.Score(t.Context(), seq)
		require.NoError(t, err)
		c.Close()
		require.True(t, vals.IsNull(int(start)), "t=0 is null")
		for j := 1; j < len(seq); j++ {
			require.False(t, vals.IsNull(int(start)+j))
			require.InDelta(t, want[j], vals.Value(int(start)+j), 1e-6)
		}
	}

	// -precision bf16 scores in bfloat16: the package's bf16 scorer, value for value;
	// an unknown precision is refused.
	outB := filepath.Join(dir, "scores-bf16.arrow")
	stdout.Reset()
	stderr.Reset()
	code = run(t.Context(), []string{"score", "-model", modelDir, "-in", in, "-out", outB, "-chunk", "16", "-precision", "bf16"}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	mb, err := xla.Open(modelDir, xla.OpenOptions{Precision: xla.PrecisionBF16})
	require.NoError(t, err)
	sb, err := xla.NewScorer(b, mb, xla.ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	gotB := readScores(t, outB)
	for i, seq := range seqs {
		want, c, err := sb.Score(t.Context(), seq)
		require.NoError(t, err)
		c.Close()
		require.Len(t, gotB[rs[i].ID], len(seq))
		for j := 1; j < len(seq); j++ {
			require.InDelta(t, want[j], gotB[rs[i].ID][j], 1e-6)
		}
	}
	require.Equal(t, 1, run(t.Context(), []string{"score", "-model", modelDir, "-in", in, "-out", outB, "-precision", "fp8"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), `-precision: "fp8", want f32 or bf16`)

	// A rollout longer than the context is skipped with a message, the rest written.
	cfgPath := filepath.Join(modelDir, "config.json")
	mc, err := data.LoadModelConfig(cfgPath)
	require.NoError(t, err)
	mc.MaxPositionEmbeddings = 8
	require.NoError(t, data.WriteModelConfig(cfgPath, mc))
	stdout.Reset()
	stderr.Reset()
	code = run(t.Context(), []string{"score", "-model", modelDir, "-in", in, "-out", out}, &stdout, &stderr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr.String(), "skip rollout b (row 1): score: 27 positions, max_position_embeddings is 8")
	require.Contains(t, stdout.String(), "2 rollouts scored, 1 skipped")

	require.Equal(t, 2, run(t.Context(), []string{"score", "-model", modelDir}, &stdout, &stderr))
}

// readScores reads a scores file: student_logprobs by rollout_id (null as 0).
func readScores(t *testing.T, path string) map[string][]float32 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	require.NoError(t, err)
	defer r.Close()
	out := map[string][]float32{}
	for k := range r.NumRecords() {
		rec, err := r.Record(k)
		require.NoError(t, err)
		ids := rec.Column(0).(*array.String)
		lists := rec.Column(1).(*array.LargeList)
		vals := lists.ListValues().(*array.Float32)
		for i := range int(rec.NumRows()) {
			start, end := lists.ValueOffsets(i)
			lp := make([]float32, end-start)
			for j := range lp {
				lp[j] = vals.Value(int(start) + j)
			}
			out[ids.Value(i)] = lp
		}
	}
	return out
}
