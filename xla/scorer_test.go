package xla

import (
	"errors"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/stretchr/testify/require"
)

// TestScoreChunkedEqualsUnchunked scores a 2k-token rollout with chunk 128 against a
// KV cache and compares with one unchunked causal pass (d=32, 1 layer).
func TestScoreChunkedEqualsUnchunked(t *testing.T) {
	n := 2048
	if testing.Short() {
		n = 512
	}
	m := testModel(t, tinyFields(map[string]any{"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
		"num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64}), 3)
	tokens := testTokens(n, m.Config.VocabSize, 4)
	t0 := time.Now()
	full := fullLogProbs(t, m, tokens)
	tFull := time.Since(t0)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 128})
	require.NoError(t, err)
	t0 = time.Now()
	chunked, cache, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	tChunked := time.Since(t0)
	defer cache.Close()
	require.Len(t, chunked, n)
	require.True(t, math.IsNaN(float64(chunked[0])))
	require.Equal(t, n, cache.Len)
	require.Equal(t, n, cache.Capacity())
	var worst float64
	for i := 1; i < n; i++ {
		worst = math.Max(worst, math.Abs(float64(chunked[i]-full[i-1])))
	}
	require.Less(t, worst, 1e-4)
	t.Logf("%d tokens: max |chunked − unchunked| = %.2g; unchunked %v, chunked (128) %v", n, worst, tFull, tChunked)
}

// TestScoreChunkRungs scores rollouts of short lengths at the default chunk (512)
// and compares each with one unchunked causal pass: a length takes the chunk
// rungs chunkRung gives (256 as one chunk of 256, 300 as 256 + 64, 150 as 128 +
// 32, 600 as 512 + 64 + 32, …), each rung exact, and the padded positions stay under 4/3 of the
// tokens plus one minimal chunk. The ladder before issue 42 (QuarterChunks) scores
// the same and pays 512 positions for each of 129…512 tokens.
func TestScoreChunkRungs(t *testing.T) {
	m := testModel(t, tinyFields(map[string]any{"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
		"num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 64}), 31)
	tokens := testTokens(600, m.Config.VocabSize, 32)
	full := fullLogProbs(t, m, tokens)
	cases := []struct{ n, chunks, positions, quarter int }{
		{256, 1, 256, 512}, {300, 2, 320, 512}, {200, 1, 256, 512}, {150, 2, 160, 512},
		{40, 1, 64, 128}, {600, 3, 608, 640},
	}
	for _, quarter := range []bool{false, true} {
		s, err := NewScorer(newTestBackend(t), m, ScorerOptions{QuarterChunks: quarter})
		require.NoError(t, err)
		for _, c := range cases {
			s.ResetStats()
			lp, kv, err := s.Score(t.Context(), tokens[:c.n])
			require.NoError(t, err)
			require.NoError(t, kv.Close())
			var worst float64
			for i := 1; i < c.n; i++ {
				worst = math.Max(worst, math.Abs(float64(lp[i]-full[i-1])))
			}
			require.Less(t, worst, 1e-4, "n=%d quarter=%v", c.n, quarter)
			st := s.Stats()
			if quarter {
				require.Equal(t, c.quarter, st.Positions, "n=%d quarter: %s", c.n, st)
				continue
			}
			require.Equal(t, c.chunks, st.Chunks, "n=%d: %s", c.n, st)
			require.Equal(t, c.positions, st.Positions, "n=%d: %s", c.n, st)
			require.LessOrEqual(t, 3*st.Positions, 4*c.n+6*minChunk, "n=%d", c.n)
		}
	}
}

func TestChunkRung(t *testing.T) {
	for _, c := range []struct{ top, rem, want, quarter int }{
		{512, 5000, 512, 512}, {512, 512, 512, 512}, {512, 400, 512, 512}, {512, 384, 256, 512},
		{512, 300, 256, 512}, {512, 256, 256, 512}, {512, 200, 256, 512}, {512, 129, 128, 512},
		{512, 128, 128, 128}, {512, 88, 64, 128}, {512, 44, 64, 128}, {512, 24, 32, 32}, {512, 22, 32, 32},
		{512, 17, 32, 32}, {512, 16, 16, 32}, {512, 1, 16, 32}, {64, 22, 32, 64}, {16, 3, 16, 16},
	} {
		require.Equal(t, c.want, chunkRung(c.top, c.rem, false), "top %d rem %d", c.top, c.rem)
		require.Equal(t, c.quarter, chunkRung(c.top, c.rem, true), "quarter: top %d rem %d", c.top, c.rem)
	}
}

// TestScoreBucketsAndReuse checks that lengths that share buckets share
// executables and that an odd length equals the same prefix of a longer rollout.
func TestScoreBucketsAndReuse(t *testing.T) {
	m := testModel(t, tinyFields(nil), 11)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 64})
	require.NoError(t, err)
	long := testTokens(150, m.Config.VocabSize, 12)
	ref, c, err := s.Score(t.Context(), long)
	require.NoError(t, err)
	c.Close()
	for _, n := range []int{1, 2, 17, 64, 65, 100, 129} {
		lp, c, err := s.Score(t.Context(), long[:n])
		require.NoError(t, err)
		require.Equal(t, n, c.Len)
		c.Close()
		for i := 1; i < n; i++ {
			require.InDelta(t, ref[i], lp[i], 1e-5, "n=%d position %d", n, i)
		}
	}
	require.Equal(t, 64, s.chunkFor(100, 64))
	require.Equal(t, 16, s.chunkFor(3, 64))
	require.Equal(t, 256, s.capacityFor(129))

	// A small attention-score budget shrinks the chunk as the cache grows; the
	// log-probs stay the same.
	small, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 64, AttentionScores: 64 * 4 * 64})
	require.NoError(t, err)
	require.Equal(t, 16, small.chunkFor(100, 256))
	lp, c, err := small.Score(t.Context(), long)
	require.NoError(t, err)
	c.Close()
	require.InDeltaSlice(t, ref[1:], lp[1:], 1e-5)
}

func TestScoreTooLong(t *testing.T) {
	m := testModel(t, tinyFields(map[string]any{"max_position_embeddings": 64}), 1)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	_, _, err = s.Score(t.Context(), testTokens(65, m.Config.VocabSize, 1))
	require.ErrorIs(t, err, ErrTooLong)
	require.ErrorContains(t, err, "65 positions, max_position_embeddings is 64")
	_, c, err := s.Score(t.Context(), testTokens(64, m.Config.VocabSize, 1))
	require.NoError(t, err)
	defer c.Close()
	_, err = s.ScoreHinted(t.Context(), testTokens(64, m.Config.VocabSize, 1), c, []credit.Hint{{InsertAt: 60, End: 64, Tokens: []int32{1}}})
	require.ErrorIs(t, err, ErrTooLong)
	_, _, err = s.Score(t.Context(), []int32{1, 265})
	require.ErrorContains(t, err, "token 265 at position 1 is outside the vocabulary [0, 265)")
}

// TestScoreHintedEqualsSplicedPass checks prefix reuse: q_t from the student's
// cache plus hint equals a from-scratch pass over prefix + hint + segment, for
// several segments (with and without hints, crossing chunk boundaries) in one call.
func TestScoreHintedEqualsSplicedPass(t *testing.T) {
	m := testModel(t, tinyFields(nil), 21)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	v := m.Config.VocabSize
	tokens := testTokens(200, v, 22)
	_, student, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	defer student.Close()
	pages, bytes := student.layout.tensors(), student.Bytes()
	segs := []credit.Hint{
		{InsertAt: 10, End: 30, Tokens: testTokens(5, v, 23)},
		{InsertAt: 31, End: 90, Tokens: testTokens(40, v, 24)},    // hint + segment cross chunks
		{InsertAt: 120, End: 200, Tokens: testTokens(100, v, 25)}, // needs a larger cache bucket
		{InsertAt: 150, End: 160},                                 // empty hint: q = s
		{InsertAt: 0, End: 8, Tokens: testTokens(3, v, 26)},       // no prefix
	}
	q, err := s.ScoreHinted(t.Context(), tokens, student, segs)
	require.NoError(t, err)
	require.Len(t, q, len(segs))
	for k, sg := range segs {
		spliced := slices.Concat(tokens[:sg.InsertAt], sg.Tokens, tokens[sg.InsertAt:sg.End])
		ref, c, err := s.Score(t.Context(), spliced)
		require.NoError(t, err)
		c.Close()
		off := sg.InsertAt + len(sg.Tokens)
		require.Len(t, q[k], sg.End-sg.InsertAt)
		for i := range q[k] {
			require.InDelta(t, ref[off+i], q[k][i], 1e-5, "segment %d, t=%d", k, sg.InsertAt+i)
		}
	}
	// The student's cache is untouched (its pages are shared with the segments'
	// copies, never written or freed by them): scoring again with it gives the same.
	require.Equal(t, pages, student.layout.tensors())
	require.Equal(t, bytes, student.Bytes())
	q2, err := s.ScoreHinted(t.Context(), tokens, student, segs)
	require.NoError(t, err)
	require.Equal(t, q, q2)
}

// TestScoreHintedSeparateTeacher uses a teacher with other weights: its prefix is
// computed with its own weights, not the student's cache.
func TestScoreHintedSeparateTeacher(t *testing.T) {
	student := testModel(t, tinyFields(nil), 31)
	teacher := testModel(t, tinyFields(nil), 32)
	ss, err := NewScorer(newTestBackend(t), student, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	ts, err := NewScorer(newTestBackend(t), teacher, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	v := student.Config.VocabSize
	tokens := testTokens(100, v, 33)
	_, sc, err := ss.Score(t.Context(), tokens)
	require.NoError(t, err)
	defer sc.Close()
	seg := credit.Hint{InsertAt: 40, End: 70, Tokens: testTokens(12, v, 34)}
	q, err := ts.ScoreHinted(t.Context(), tokens, sc, []credit.Hint{seg}) // student cache: ignored
	require.NoError(t, err)
	ref, c, err := ts.Score(t.Context(), slices.Concat(tokens[:seg.InsertAt], seg.Tokens, tokens[seg.InsertAt:seg.End]))
	require.NoError(t, err)
	c.Close()
	for i := range q[0] {
		require.InDelta(t, ref[seg.InsertAt+len(seg.Tokens)+i], q[0][i], 1e-5)
	}
}

func TestLoadModelStrict(t *testing.T) {
	mc := testConfig(t, tinyFields(map[string]any{"tie_word_embeddings": false}))
	good := newMemWeights(testWeights(mc, 1))
	_, err := Load(mc, good, PrecisionF32)
	require.NoError(t, err)

	missing := newMemWeights(testWeights(mc, 1))
	delete(missing, "model.layers.1.mlp.up_proj.weight")
	_, err = Load(mc, missing, PrecisionF32)
	require.ErrorContains(t, err, "tensor model.layers.1.mlp.up_proj.weight: missing (want shape [128 64])")

	extra := newMemWeights(testWeights(mc, 1))
	extra["model.layers.2.mlp.up_proj.weight"] = extra["model.layers.1.mlp.up_proj.weight"]
	_, err = Load(mc, extra, PrecisionF32)
	require.ErrorContains(t, err, "tensor model.layers.2.mlp.up_proj.weight: unexpected for llama with 2 layers")

	shaped := newMemWeights(testWeights(mc, 1))
	w := shaped["model.layers.0.self_attn.k_proj.weight"]
	w.Shape = []int{64, 32}
	shaped[w.Name] = w
	_, err = Load(mc, shaped, PrecisionF32)
	require.ErrorContains(t, err, "tensor model.layers.0.self_attn.k_proj.weight: shape [64 32], want [32 64]")

	scope, name := HFScope("model.layers.3.self_attn.q_proj.weight")
	require.Equal(t, "/model/layers/3/self_attn/q_proj", scope)
	require.Equal(t, "weight", name)
}

// TestOpenModelInitModel loads an init-model directory (bf16) end to end.
func TestOpenModelInitModel(t *testing.T) {
	dir := t.TempDir() + "/m"
	_, err := dataInitModel(dir, "bfloat16")
	require.NoError(t, err)
	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	lp, c, err := s.Score(t.Context(), []int32{256, 104, 105, 264})
	require.NoError(t, err)
	defer c.Close()
	for _, x := range lp[1:] {
		require.InDelta(t, -math.Log(265), x, 0.5) // init std 0.02: near uniform
	}
	_, err = Open(t.TempDir(), OpenOptions{})
	require.True(t, errors.Is(err, os.ErrNotExist) || err != nil)
}
