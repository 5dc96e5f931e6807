package creditfile

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"
)

func TestCreditFileRoundTrip(t *testing.T) {
	nan := float32(math.NaN())
	rows := []Row{
		{RolloutID: "a", TaskID: "t1", Tokens: []int32{1, 2, 3}, Step: 4, PolicyVersion: 2, TeacherVersion: 3,
			Reward: 0.5, HasReward: true, OutcomeAdv: 0.25, LossMask: []bool{false, true, true},
			Student: []float32{0, -1, -2}, Teacher: []float32{nan, -0.5, nan}, Advantages: []float32{0, 0.3, 0.25},
			Hints: []Hint{{Segment: 2, InsertAt: 1, End: 2, Source: "rules", Reason: "tool_error", Text: "try x", Tokens: []int32{9, 8}}}},
		{RolloutID: "b", Tokens: []int32{5}, LossMask: []bool{false}, Student: []float32{0}, Teacher: []float32{nan}, Advantages: []float32{0}},
	}
	path := filepath.Join(t.TempDir(), "out", "x"+Suffix)
	ok, err := Publish(path, rows)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = Publish(path, rows[:1])
	require.NoError(t, err)
	require.False(t, ok, "a published file is never replaced")

	got, err := Read(path)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.True(t, math.IsNaN(float64(got[0].Teacher[0])))
	got[0].Teacher[0], got[0].Teacher[2], rows[0].Teacher[0], rows[0].Teacher[2] = 0, 0, 0, 0
	got[1].Teacher[0], rows[1].Teacher[0] = 0, 0
	require.Equal(t, rows[0], got[0])
	require.Equal(t, "", got[1].TaskID)
	require.False(t, got[1].HasReward)
	require.Empty(t, got[1].Hints)

	staged := filepath.Join(t.TempDir(), "r.arrow")
	require.NoError(t, Write(staged, rows[1:], false))
	require.NoError(t, SyncFiles([]string{staged}))
	got, err = Read(staged)
	require.NoError(t, err)
	require.Equal(t, "b", got[0].RolloutID)

	require.Error(t, Write(staged, []Row{{RolloutID: "c", Tokens: []int32{1}}}, true))
}

func TestCreditFileV2Columns(t *testing.T) {
	nan := float32(math.NaN())
	row := Row{RolloutID: "a", Tokens: []int32{1, 2, 3}, LossMask: []bool{false, true, true},
		Student: []float32{0, -1, -2}, Teacher: []float32{nan, -0.5, nan}, Advantages: []float32{0, 0.3, 0.25},
		Base: []float32{nan, -1, nan}, Delta: []float32{nan, 0.5, nan}, Rho: []float32{0, 1, 0.9},
		Sampler: []float32{nan, -1.1, -1.9}, Tokenizer: "bytes-v1",
		Segments: []Segment{{Start: 0, End: 1, Kind: "user"}, {Start: 1, End: 3, Kind: "tool_call", Tool: "grep", Status: "error"}}}
	path := filepath.Join(t.TempDir(), "x"+Suffix)
	require.NoError(t, Write(path, []Row{row, {RolloutID: "v1-like", Tokens: []int32{4},
		LossMask: []bool{true}, Student: []float32{-1}, Teacher: []float32{nan}, Advantages: []float32{1}}}, true))
	got, err := Read(path)
	require.NoError(t, err)
	require.Len(t, got, 2)
	g := got[0]
	require.Equal(t, row.Segments, g.Segments)
	require.Equal(t, "bytes-v1", g.Tokenizer)
	require.Equal(t, row.Rho, g.Rho)
	require.True(t, math.IsNaN(float64(g.Base[0])) && math.IsNaN(float64(g.Delta[2])) && math.IsNaN(float64(g.Sampler[0])))
	require.Equal(t, []float32{-1, 0.5, -1.1}, []float32{g.Base[1], g.Delta[1], g.Sampler[1]})
	require.Equal(t, float32(-1.9), g.Sampler[2])
	require.Nil(t, got[1].Base, "a row without v2 per-token values reads back nil")
	require.Nil(t, got[1].Segments)
	require.Equal(t, "", got[1].Tokenizer)

	row.Delta = row.Delta[:2]
	err = Write(path, []Row{row}, true)
	require.ErrorContains(t, err, `rollout "a": 3 tokens, 2 deltas`)
}

// TestCreditFileReadsV1 reads a file written by the version 1 writer
// (testdata/gen_credit_v1.go.txt): readers keep working across the v2 change.
func TestCreditFileReadsV1(t *testing.T) {
	rows, err := Read(filepath.Join("testdata", "credit_v1.arrow"))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	r := rows[0]
	require.Equal(t, "r-0", r.RolloutID)
	require.Equal(t, "task-a", r.TaskID)
	require.Equal(t, []int32{72, 105, 33, 10}, r.Tokens)
	require.Equal(t, []float32{0, 0.7, 0.3, 0.5}, r.Advantages)
	require.Equal(t, float32(-0.75), r.Teacher[2])
	require.Equal(t, "check the tool", r.Hints[0].Text)
	require.True(t, r.HasReward)
	require.Nil(t, r.Base)
	require.Nil(t, r.Delta)
	require.Nil(t, r.Segments)
	require.Equal(t, float32(-0.5), rows[1].OutcomeAdv)
}

// TestCreditFileReadsV2 reads a file written by the version 2 writer
// (testdata/gen_credit_v2.go.txt): its hints have no v3 fields.
func TestCreditFileReadsV2(t *testing.T) {
	rows, err := Read(filepath.Join("testdata", "credit_v2.arrow"))
	require.NoError(t, err)
	require.Len(t, rows, 2)
	r := rows[0]
	require.Equal(t, "r-0", r.RolloutID)
	require.Equal(t, []float32{0, 1, 0.5, 2}, r.Rho)
	require.Equal(t, "bytes-v1", r.Tokenizer)
	require.Equal(t, "grep", r.Segments[1].Tool)
	require.Equal(t, []Hint{{Segment: 1, InsertAt: 1, End: 3, Source: "rules", Reason: "tool_error",
		Text: "check the tool", Tokens: []int32{60, 104, 62}}}, r.Hints, "a v2 hint reads back with zero v3 fields")
	require.Nil(t, rows[1].Base)
}

var update = flag.Bool("update", false, "rewrite testdata/credit_v4.arrow with today's writer")

// goldenV3Rows are the rows of testdata/credit_v3.arrow: a topk hint with its
// teacher's alternatives, a sampled_token context-only hint, and a row without hints.
func goldenV3Rows() []Row {
	nan := float32(math.NaN())
	return []Row{
		{RolloutID: "r-0", TaskID: "task-a", Tokens: []int32{72, 105, 33, 10, 99}, Step: 5, PolicyVersion: 4, TeacherVersion: 4,
			Reward: 0, HasReward: true, OutcomeAdv: -0.5, LossMask: []bool{false, true, true, true, false},
			Student: []float32{0, -1.5, -0.25, -2, -1}, Teacher: []float32{nan, -0.5, -0.75, nan, nan},
			Advantages: []float32{0, -0.5, -0.5, -0.5, 0},
			Base:       []float32{nan, -1.5, -0.25, nan, nan}, Delta: []float32{nan, 1, -0.5, nan, nan}, Rho: []float32{0, 1, 0.5, 2, 0},
			Sampler: []float32{nan, -1.4, -0.3, -2.1, nan}, Tokenizer: "bytes-v1",
			Segments: []Segment{{Start: 0, End: 1, Kind: "user"}, {Start: 1, End: 4, Kind: "tool_call", Tool: "grep", Status: "error"},
				{Start: 4, End: 5, Kind: "tool_result", Tool: "grep", Status: "error"}},
			Hints: []Hint{{Segment: 1, InsertAt: 1, End: 3, Source: "rules", Reason: "tool_error", Text: "check the tool",
				Tokens: []int32{60, 104, 62}, Context: "sibling+feedback+hint", LossMode: "topk", Divergence: "jsd", JSDAlpha: 0.5,
				TeacherLogProbs: []float32{-0.5, -0.75},
				TopIDs:          [][]int32{{99, 105, 97}, {33, 46, 63}},
				TopLogProbs:     [][]float32{{-0.2, -0.5, -3}, {-0.75, -1, -2.5}}}}},
		{RolloutID: "r-1", Tokens: []int32{65, 66, 67}, Step: 5, PolicyVersion: 4, TeacherVersion: 4,
			OutcomeAdv: 0, LossMask: []bool{false, true, true}, Student: []float32{0, -3, -1}, Teacher: []float32{nan, -2, nan},
			Advantages: []float32{0, 0.5, 0}, Base: []float32{nan, -3, nan}, Delta: []float32{nan, 1, nan},
			Rho: []float32{0, 1, 1}, Sampler: []float32{nan, -3, -1}, Tokenizer: "bytes-v1",
			Hints: []Hint{{Segment: 0, InsertAt: 1, End: 2, Source: "context", Reason: "sibling", Tokens: []int32{60, 62},
				Context: "sibling", LossMode: "sampled_token", TeacherLogProbs: []float32{-2}}}},
		{RolloutID: "r-2", Tokens: []int32{65}, Step: 5, LossMask: []bool{false}, Student: []float32{0},
			Teacher: []float32{nan}, Advantages: []float32{0}},
	}
}

// TestCreditFileV3Golden reads testdata/credit_v3.arrow (written by the v3 writer,
// frozen since v4) and checks every field, the v3 hint fields included; its rows
// read as scored at temperature 1.
func TestCreditFileV3Golden(t *testing.T) {
	want := goldenV3Rows()
	for i := range want {
		want[i].Temperature = 1
	}
	checkGolden(t, filepath.Join("testdata", "credit_v3.arrow"), want)
}

// TestCreditFileV4Golden reads testdata/credit_v4.arrow (written by the v4 writer;
// -update rewrites it): the v3 rows with the temperature each was scored at.
func TestCreditFileV4Golden(t *testing.T) {
	path := filepath.Join("testdata", "credit_v4.arrow")
	want := goldenV3Rows()
	for i, T := range []float32{0.7, 1, 1.5} {
		want[i].Temperature = T
	}
	if *update {
		require.NoError(t, Write(path, want, true))
	}
	checkGolden(t, path, want)
}

// checkGolden reads path and compares every row with want.
func checkGolden(t *testing.T, path string, want []Row) {
	t.Helper()
	got, err := Read(path)
	require.NoError(t, err)
	require.Len(t, got, len(want))
	for i := range want {
		// NaN never equals NaN: compare the null positions, then zero them.
		for _, p := range [][2][]float32{{want[i].Teacher, got[i].Teacher}, {want[i].Base, got[i].Base},
			{want[i].Delta, got[i].Delta}, {want[i].Sampler, got[i].Sampler}} {
			require.Len(t, p[1], len(p[0]))
			for k := range p[0] {
				require.Equal(t, math.IsNaN(float64(p[0][k])), math.IsNaN(float64(p[1][k])), "row %d, token %d", i, k)
				if math.IsNaN(float64(p[0][k])) {
					p[0][k], p[1][k] = 0, 0
				}
			}
		}
		require.Equal(t, want[i], got[i], "row %d", i)
	}
	h := got[0].Hints[0]
	require.Equal(t, "sibling+feedback+hint", h.Context)
	require.Equal(t, []int32{99, 105, 97}, h.TopIDs[0])
}

func TestCreditFileV3HintChecks(t *testing.T) {
	row := goldenV3Rows()[0]
	path := filepath.Join(t.TempDir(), "x"+Suffix)
	bad := row
	bad.Hints = []Hint{row.Hints[0]}
	bad.Hints[0].TeacherLogProbs = []float32{-1}
	require.ErrorContains(t, Write(path, []Row{bad}, false), `rollout "r-0": hint 0: teacher_logprobs: 1 values for the 2 positions of [1, 3)`)
	bad.Hints[0] = row.Hints[0]
	bad.Hints[0].TopIDs = bad.Hints[0].TopIDs[:1]
	require.ErrorContains(t, Write(path, []Row{bad}, false), "top_ids: 1 rows, top_logprobs: 2 rows")
	bad.Hints[0] = row.Hints[0]
	bad.Hints[0].TopLogProbs = [][]float32{{-1}, {-1, -2, -3}}
	require.ErrorContains(t, Write(path, []Row{bad}, false), "position 1: 3 top_ids, 1 top_logprobs")
}

func TestCreditFileRejectsUnknownVersion(t *testing.T) {
	md := arrow.NewMetadata([]string{creditVersionKey}, []string{"9"})
	schema := arrow.NewSchema(Schema().Fields(), &md)
	path := filepath.Join(t.TempDir(), "x"+Suffix)
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	_, err = Read(path)
	require.ErrorContains(t, err, `credit schema version "9"`)
	require.ErrorContains(t, err, path)
}
