package rollout

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"
)

var updateInterop = flag.Bool("update-interop", false, "rewrite testdata/interop/arrow-go/ (the arrow-go fixtures of TestInterop)")

// interopArrowGoTypes are the types of the arrow-go fixtures: what a Go collector
// building with arrow-go's builders might pick, other than the canonical schema.
func interopArrowGoTypes() map[string]arrow.DataType {
	i32, i64 := arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64
	return map[string]arrow.DataType{
		ColRolloutID: arrow.BinaryTypes.StringView, ColTaskID: arrow.BinaryTypes.LargeString,
		ColTokens: arrow.ListOf(i64), ColLogProbs: arrow.ListOf(arrow.PrimitiveTypes.Float32),
		ColPolicyVersion: i32, ColSegments: arrow.ListOf(fxSegType(i32, arrow.BinaryTypes.String)),
	}
}

// TestInteropWriteArrowGo writes the arrow-go fixtures of the interop suite with
// arrow-go's own IPC writers, when run with -update-interop:
//
//	go test ./rollout/ -run TestInteropWriteArrowGo -update-interop
func TestInteropWriteArrowGo(t *testing.T) {
	if !*updateInterop {
		t.Skip("run with -update-interop to rewrite testdata/interop/arrow-go/")
	}
	spec := loadInteropSpec(t)
	dir := filepath.Join(interopDir, "arrow-go")
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	// A Rollout reads a null policy_version as 0: write the spec's nulls as nulls.
	nullPolicy := map[int]any{}
	for i, m := range spec.Rollouts {
		if m["policy_version"] == nil {
			nullPolicy[i] = nil
		}
	}
	write := func(name string, rs []*Rollout, format, codec string, opts ...ipc.Option) {
		var recs []arrow.RecordBatch
		for i := 0; i < len(rs); i += spec.BatchRows {
			over := map[string]map[int]any{ColPolicyVersion: {}}
			for k := range nullPolicy {
				if k >= i && k < i+spec.BatchRows {
					over[ColPolicyVersion][k-i] = nil
				}
			}
			recs = append(recs, fxTyped(t, rs[i:min(i+spec.BatchRows, len(rs))], interopArrowGoTypes(), over))
		}
		f, err := os.Create(filepath.Join(dir, name+"."+format+codec+".arrow"))
		require.NoError(t, err)
		defer f.Close()
		opts = append([]ipc.Option{ipc.WithSchema(recs[0].Schema())}, opts...)
		var w interface {
			Write(arrow.RecordBatch) error
			Close() error
		}
		if format == "file" {
			w, err = ipc.NewFileWriter(f, opts...)
			require.NoError(t, err)
		} else {
			w = ipc.NewWriter(f, opts...)
		}
		for _, rec := range recs {
			require.NoError(t, w.Write(rec))
		}
		require.NoError(t, w.Close())
	}
	for _, format := range []string{"file", "stream"} {
		write("valid", spec.rollouts(t), format, "")
		write("valid", spec.rollouts(t), format, ".lz4", ipc.WithLZ4())
		write("valid", spec.rollouts(t), format, ".zstd", ipc.WithZstd())
		for i, m := range spec.Malformed {
			write(m.Name, spec.malformed(t, i), format, "")
		}
	}
}
