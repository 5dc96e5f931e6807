// Package arrowtest holds the Arrow helpers that rollout's tests and the daemon's
// end-to-end tests share: the record batch of an IPC stream, and a record without one
// of its columns (a rollout file of the schema before that column existed). It is test
// code: only tests import it, and it imports no project package, so rollout's own
// tests can use it.
package arrowtest

import (
	"io"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/stretchr/testify/require"
)

// StreamRecord returns the first record batch of the Arrow IPC stream r, retained: the
// caller releases it.
func StreamRecord(t testing.TB, r io.Reader) arrow.RecordBatch {
	t.Helper()
	rd, err := ipc.NewReader(r)
	require.NoError(t, err)
	defer rd.Release()
	require.True(t, rd.Next(), "a record batch in the stream: %v", rd.Err())
	rec := rd.RecordBatch()
	rec.Retain()
	return rec
}

// WithoutColumn returns rec without its column name, every other column and the
// schema's metadata kept; the caller releases it (rec is not released).
func WithoutColumn(rec arrow.RecordBatch, name string) arrow.RecordBatch {
	s := rec.Schema()
	var fields []arrow.Field
	var cols []arrow.Array
	for i, f := range s.Fields() {
		if f.Name != name {
			fields, cols = append(fields, f), append(cols, rec.Column(i))
		}
	}
	md := s.Metadata()
	return array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
}
