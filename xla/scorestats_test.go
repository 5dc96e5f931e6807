package xla

import (
	"math"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"
)

// TestScoreStatsCompilesOnce checks the Scorer's breakdown: the first pass compiles
// its programs (the cache's zeros and one chunk step; timed apart from the run),
// a second pass of the same length compiles none and gives the same log-probs, and
// the chunk and padding counts follow the buckets.
func TestScoreStatsCompilesOnce(t *testing.T) {
	m := testModel(t, tinyFields(nil), 21)
	s, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 64})
	require.NoError(t, err)
	tokens := testTokens(150, m.Config.VocabSize, 22) // chunks 64, 64, 32 (the tail of 22 padded); capacity 256

	first, c, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	c.Close()
	st := s.Stats()
	// zeros 256 and one step program per chunk and causal span: the chunks attend
	// to 64, 128 and 32+128 cache positions.
	require.Equal(t, 4, st.Programs, "zeros 256 and steps 64 over spans 64, 128, 32 over 160: %s", st)
	require.Equal(t, 3, st.Attention.Programs)
	require.Equal(t, int64(64*64+64*128+32*160), st.Attention.AttendedPairs)
	require.Greater(t, st.CompileSeconds, 0.0)
	require.Greater(t, st.ExecuteSeconds, 0.0)
	require.Greater(t, st.CacheSeconds, 0.0)
	require.Equal(t, ScoreStats{Passes: 1, Chunks: 3, Positions: 160, Tokens: 150, Programs: 4},
		ScoreStats{Passes: st.Passes, Chunks: st.Chunks, Positions: st.Positions, Tokens: st.Tokens, Programs: st.Programs})

	s.ResetStats()
	second, c, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	c.Close()
	st = s.Stats()
	require.Equal(t, 0, st.Programs, "%s", st)
	require.Zero(t, st.CompileSeconds)
	require.Equal(t, 3, st.Chunks)
	require.Equal(t, first[1:], second[1:])
	require.Contains(t, st.String(), "0 programs compiled")
}

// TestPlaceMovesWeightsToDevice checks that a Scorer's first pass leaves the
// model's weights on the device only (no host copy beside them), that reading them
// back gives exactly the loaded values (a checkpoint save reads them so), that the
// next pass drops the host copies that read made, and that a second Scorer of the
// same model scores the same.
func TestPlaceMovesWeightsToDevice(t *testing.T) {
	fields := tinyFields(nil)
	mc := testConfig(t, fields)
	ws := testWeights(mc, 23)
	m, err := Load(mc, newMemWeights(ws), PrecisionF32)
	require.NoError(t, err)
	for v := range m.ctx.IterVariables() {
		require.True(t, v.MustValue().HasLocal(), "%s before", v.ScopeAndName())
	}
	b := newTestBackend(t)
	s, err := NewScorer(b, m, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	tokens := testTokens(40, mc.VocabSize, 24)
	lp, c, err := s.Score(t.Context(), tokens)
	require.NoError(t, err)
	c.Close()
	onDeviceOnly := func(when string) {
		for v := range m.ctx.IterVariables() {
			w := v.MustValue()
			require.True(t, w.IsOnDevice(0), "%s on the device %s", v.ScopeAndName(), when)
			require.False(t, w.HasLocal(), "%s: host copy kept %s", v.ScopeAndName(), when)
		}
	}
	onDeviceOnly("after the first pass")

	s2, err := NewScorer(b, m, ScorerOptions{Chunk: 32})
	require.NoError(t, err)
	lp2, c, err := s2.Score(t.Context(), tokens)
	require.NoError(t, err)
	c.Close()
	require.Equal(t, lp[1:], lp2[1:])

	want := map[string][]float32{}
	for _, w := range ws {
		want[w.Name] = w.Values
	}
	for v := range m.ctx.IterVariables() {
		name := HFName(v.Scope(), v.Name())
		require.Equal(t, want[name], tensors.MustCopyFlatData[float32](v.MustValue()), name)
	}
	_, c, err = s.Score(t.Context(), tokens)
	require.NoError(t, err)
	c.Close()
	onDeviceOnly("after a read and another pass")
}

// TestNewCacheOnDevice checks that KV caches live on the device only: with
// BucketAttention an empty cache is made there (zeros, every layer's K and V at the
// bucket's capacity); a paged cache holds one page per Chunk positions run, each
// made by a chunk step, and the zero page standing for unwritten pages is zeros.
func TestNewCacheOnDevice(t *testing.T) {
	m := testModel(t, tinyFields(nil), 25)
	cfg := m.Config
	onDevice := func(x *tensors.Tensor, positions int) {
		require.Equal(t, []int{positions, 1, cfg.NumKeyValueHeads, cfg.HeadDim}, x.Shape().Dimensions)
		require.True(t, x.IsOnDevice(0))
		require.False(t, x.HasLocal())
	}
	zeros := func(x *tensors.Tensor) {
		for _, f := range tensors.MustCopyFlatData[float32](x) {
			if f != 0 || math.Signbit(float64(f)) {
				t.Fatalf("cache value %v, want +0", f)
			}
		}
	}
	bucket, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 16, BucketAttention: true})
	require.NoError(t, err)
	c, err := bucket.newCache(40)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, 64, c.Capacity())
	cc := c.layout.(*contiguousCache)
	require.Len(t, cc.kv.K, cfg.NumHiddenLayers)
	require.Len(t, cc.kv.V, cfg.NumHiddenLayers)
	require.Equal(t, int64(2*cfg.NumHiddenLayers*64*cfg.NumKeyValueHeads*cfg.HeadDim*4), c.Bytes())
	for _, x := range cc.kv.all() {
		onDevice(x, 64)
		zeros(x)
	}

	paged, err := NewScorer(newTestBackend(t), m, ScorerOptions{Chunk: 16})
	require.NoError(t, err)
	_, pc, err := paged.Score(t.Context(), testTokens(40, cfg.VocabSize, 3))
	require.NoError(t, err)
	defer pc.Close()
	require.Equal(t, 48, pc.Capacity(), "3 pages of 16")
	require.Equal(t, 40, pc.Len)
	require.Equal(t, int64(2*cfg.NumHiddenLayers*48*cfg.NumKeyValueHeads*cfg.HeadDim*4), pc.Bytes())
	for _, x := range pc.layout.tensors() {
		onDevice(x, 16)
	}
	onDevice(paged.zeroPage, 16)
	zeros(paged.zeroPage)
}
