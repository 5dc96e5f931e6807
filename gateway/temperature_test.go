package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSessionTemperature: a session's rollout records the sampling temperature its
// turns share (0 for greedy turns), and none (scored at 1) when its turns differ or
// one comes from a journal line written before turns recorded it.
func TestSessionTemperature(t *testing.T) {
	turn := func(n int, temp *float64) *turnRecord {
		return &turnRecord{Turn: n, Tokens: []int32{1, 2}, LogProbs: []*float32{nil, new(float32)},
			Segments: []segRecord{{Start: int32(2 * (n - 1)), End: int32(2 * n), Kind: "assistant"}}}
	}
	at := func(v float64) *float64 { return &v }
	for _, tc := range []struct {
		name  string
		temps []*float64
		want  float32
		has   bool
	}{
		{"one temperature", []*float64{at(0.5), at(0.5)}, 0.5, true},
		{"greedy", []*float64{at(0)}, 0, true},
		{"default", []*float64{at(1)}, 1, true},
		{"turns differ", []*float64{at(0.5), at(1)}, 0, false},
		{"an older journal line", []*float64{at(0.5), nil}, 0, false},
	} {
		s := &session{id: "s", version: -1}
		for i, tp := range tc.temps {
			rec := turn(i+1, tp)
			rec.Temperature = tp
			s.apply(rec)
		}
		// A feedback line (no tokens) leaves it as it is.
		s.apply(&turnRecord{Turn: len(tc.temps), Comment: "ok", CommentTurn: 1})
		r := s.rollout()
		require.Equal(t, tc.has, r.HasTemperature, tc.name)
		require.Equal(t, tc.want, r.Temperature, tc.name)
	}
}
