package rollout

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"
)

// vectorsDir holds the test vectors that the Go and the Python test suites share
// (testdata/vectors/README.md describes the format).
const vectorsDir = "../testdata/vectors"

// vector is one shared test vector: rollouts that form one file, read with options,
// and the problems expected on each row.
type vector struct {
	Description string `json:"description"`
	Options     struct {
		VocabSize int    `json:"vocab_size"`
		Tokenizer string `json:"tokenizer"`
	} `json:"options"`
	Rollouts []vectorRollout   `json:"rollouts"`
	Expect   [][]vectorProblem `json:"expect"`
}

// vectorRollout is a rollout in JSON: a nil pointer (absent or null) is a null.
type vectorRollout struct {
	RolloutID     *string           `json:"rollout_id"`
	TaskID        *string           `json:"task_id"`
	PolicyVersion *int64            `json:"policy_version"`
	Tokenizer     *string           `json:"tokenizer"`
	Tokens        *[]*int32         `json:"tokens"`
	LogProbs      *[]*jsonFloat     `json:"logprobs"`
	Segments      *[]*vectorSegment `json:"segments"`
	Reward        *jsonFloat        `json:"reward"`
	Feedback      *int8             `json:"feedback"`
	Temperature   *jsonFloat        `json:"temperature"`
}

type vectorSegment struct {
	Start    *int32  `json:"start"`
	End      *int32  `json:"end"`
	Kind     *string `json:"kind"`
	Tool     *string `json:"tool"`
	Status   *int8   `json:"status"`
	Feedback *string `json:"feedback"`
}

type vectorProblem struct {
	Code   Code   `json:"code"`
	Column string `json:"column"`
	Reason string `json:"reason"`
}

// jsonFloat is a float32 written as a JSON number or as "NaN", "Infinity", "-Infinity".
// A number is parsed as float64 and then rounded to float32, as Python does.
type jsonFloat float32

func (f *jsonFloat) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		switch s {
		case "NaN":
			*f = jsonFloat(math.NaN())
		case "Infinity":
			*f = jsonFloat(math.Inf(1))
		case "-Infinity":
			*f = jsonFloat(math.Inf(-1))
		default:
			return fmt.Errorf("float %q: want a number, NaN, Infinity or -Infinity", s)
		}
		return nil
	}
	var x float64
	if err := json.Unmarshal(b, &x); err != nil {
		return err
	}
	*f = jsonFloat(float32(x))
	return nil
}

// TestSharedVectors reads every shared vector as an Arrow file (built column by column,
// so that nulls are exactly what the JSON says) with the reader, which validates each
// row, and compares each row's problems with the expected code, column and reason.
func TestSharedVectors(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(vectorsDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no shared vectors in %s", vectorsDir)
	covered := map[Code]bool{}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".json"), func(t *testing.T) {
			v := loadVector(t, path)
			file := filepath.Join(t.TempDir(), "v.arrow")
			writeVectorFile(t, file, v.Rollouts)

			r, err := OpenReader(file, ReadOptions{VocabSize: v.Options.VocabSize, Tokenizer: v.Options.Tokenizer})
			require.NoError(t, err)
			defer r.Close()
			row := 0
			for r.Next() {
				require.Less(t, row, len(v.Expect), "more rows than expectations")
				got := []vectorProblem{}
				for _, p := range r.Problems() {
					got = append(got, vectorProblem{p.Code, p.Column, p.Reason})
					require.Equal(t, row, p.Row)
					covered[p.Code] = true
				}
				want := v.Expect[row]
				if want == nil {
					want = []vectorProblem{}
				}
				require.Equal(t, want, got, "row %d (%s)", row, v.Description)
				row++
			}
			require.NoError(t, r.Err())
			require.Equal(t, len(v.Expect), row)
		})
	}
	// Every row-level code but the cross-file E_DUP_ROLLOUT has a vector.
	var missing []string
	for _, c := range []Code{EEmptyID, EDupIDInFile, ENullTokens, ELenMismatch, ETokenRange, ELogprobNaN,
		ELogprobInf, ELogprobPositive, ESegRange, ESegOrder, ESegOverlap, ESegKind, ESegStatus, EFeedbackRange,
		ERewardNaN, ETokenizer, ETemperature} {
		if !covered[c] {
			missing = append(missing, string(c))
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "row-level codes without a shared vector")
}

func loadVector(t *testing.T, path string) vector {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var v vector
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), "decode %s", path)
	require.Len(t, v.Expect, len(v.Rollouts), "%s: one expectation per rollout", path)
	return v
}

// writeVectorFile writes rollouts as an Arrow IPC file in Schema(), one record batch.
func writeVectorFile(t *testing.T, path string, rollouts []vectorRollout) {
	t.Helper()
	schema := Schema()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	str := func(sb array.Builder, s *string) {
		if s == nil {
			sb.AppendNull()
		} else {
			sb.(*array.StringBuilder).Append(*s)
		}
	}
	for _, ro := range rollouts {
		str(b.Field(0), ro.RolloutID)
		str(b.Field(1), ro.TaskID)
		if ro.PolicyVersion == nil {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Int64Builder).Append(*ro.PolicyVersion)
		}
		str(b.Field(3), ro.Tokenizer)

		tb := b.Field(4).(*array.LargeListBuilder)
		if ro.Tokens == nil {
			tb.AppendNull()
		} else {
			tb.Append(true)
			vb := tb.ValueBuilder().(*array.Int32Builder)
			for _, x := range *ro.Tokens {
				if x == nil {
					vb.AppendNull()
				} else {
					vb.Append(*x)
				}
			}
		}
		lb := b.Field(5).(*array.LargeListBuilder)
		if ro.LogProbs == nil {
			lb.AppendNull()
		} else {
			lb.Append(true)
			vb := lb.ValueBuilder().(*array.Float32Builder)
			for _, x := range *ro.LogProbs {
				if x == nil {
					vb.AppendNull()
				} else {
					vb.Append(float32(*x))
				}
			}
		}

		sb := b.Field(6).(*array.ListBuilder)
		if ro.Segments == nil {
			sb.AppendNull()
		} else {
			sb.Append(true)
			st := sb.ValueBuilder().(*array.StructBuilder)
			for _, s := range *ro.Segments {
				if s == nil {
					st.AppendNull()
					continue
				}
				st.Append(true)
				i32 := func(i int, v *int32) {
					if v == nil {
						st.FieldBuilder(i).AppendNull()
					} else {
						st.FieldBuilder(i).(*array.Int32Builder).Append(*v)
					}
				}
				i32(0, s.Start)
				i32(1, s.End)
				str(st.FieldBuilder(2), s.Kind)
				str(st.FieldBuilder(3), s.Tool)
				if s.Status == nil {
					st.FieldBuilder(4).AppendNull()
				} else {
					st.FieldBuilder(4).(*array.Int8Builder).Append(*s.Status)
				}
				str(st.FieldBuilder(5), s.Feedback)
			}
		}

		if ro.Reward == nil {
			b.Field(7).AppendNull()
		} else {
			b.Field(7).(*array.Float32Builder).Append(float32(*ro.Reward))
		}
		if ro.Feedback == nil {
			b.Field(8).AppendNull()
		} else {
			b.Field(8).(*array.Int8Builder).Append(*ro.Feedback)
		}
		if ro.Temperature == nil {
			b.Field(9).AppendNull()
		} else {
			b.Field(9).(*array.Float32Builder).Append(float32(*ro.Temperature))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()

	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(schema), ipc.WithAllocator(memory.DefaultAllocator))
	require.NoError(t, err)
	require.NoError(t, w.Write(rec))
	require.NoError(t, w.Close())
}
