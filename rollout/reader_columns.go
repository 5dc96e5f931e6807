package rollout

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

// The column types CheckSchema accepts, seen through one accessor per class, each
// checked once per batch so that reading a row cannot index out of range. Strings,
// ints and floats are read one value per row (or per segment); token ids and
// log-probs, the bulk of a file, are slices into the batch when the element type is
// the canonical one and are converted once per batch otherwise (convertTokens,
// convertLogProbs).

// strValues is an Arrow array of strings: *array.String, *array.LargeString or
// *array.StringView.
type strValues interface {
	arrow.Array
	Value(i int) string
	ValidateFull() error
}

// strCol is a column of strings, plain or dictionary-encoded.
type strCol struct {
	a    arrow.Array       // the column: its validity
	vals strValues         // the column itself, or the dictionary's values
	dict *array.Dictionary // nil unless dictionary-encoded
}

func (c strCol) valid(i int) bool {
	if !c.a.IsValid(i) {
		return false
	}
	return c.dict == nil || c.vals.IsValid(c.dict.GetValueIndex(i))
}

// value returns element i; it aliases the batch (strings.Clone to keep it).
func (c strCol) value(i int) string {
	if c.dict != nil {
		return c.vals.Value(c.dict.GetValueIndex(i))
	}
	return c.vals.Value(i)
}

// checkStrCol checks a string column of n values: offsets, views and utf-8 of its
// values, and for a dictionary the width of its index buffer and every index.
func checkStrCol(a arrow.Array, name string, n int) (strCol, error) {
	c := strCol{a: a}
	if err := checkArray(a, name, n); err != nil {
		return c, err
	}
	vals := a
	if d, ok := a.(*array.Dictionary); ok {
		c.dict, vals = d, d.Dictionary()
	}
	sv, ok := vals.(strValues)
	if !ok {
		return c, fmt.Errorf("%s: unexpected array type %T", name, vals)
	}
	if err := checkBitmap(sv); err != nil {
		return c, fmt.Errorf("%s values: %w", name, err)
	}
	if err := sv.ValidateFull(); err != nil {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	c.vals = sv
	if c.dict != nil {
		width := c.dict.Indices().DataType().(arrow.FixedWidthDataType).Bytes()
		buf := c.dict.Data().Buffers()[1]
		if need := (c.dict.Data().Offset() + n) * width; n > 0 && (buf == nil || buf.Len() < need) {
			return c, fmt.Errorf("%s: dictionary index buffer is shorter than %d bytes", name, need)
		}
		for i := 0; i < n; i++ {
			if a.IsValid(i) {
				if k := c.dict.GetValueIndex(i); k < 0 || k >= sv.Len() {
					return c, fmt.Errorf("%s: dictionary index %d at %d is outside the %d values", name, k, i, sv.Len())
				}
			}
		}
	}
	return c, nil
}

// intCol is a column of any integer type, read as int64.
type intCol struct {
	a   arrow.Array
	get func(i int) int64
}

func intGetter[T int8 | int16 | int32 | int64 | uint8 | uint16 | uint32](vals []T) func(int) int64 {
	return func(i int) int64 { return int64(vals[i]) }
}

// checkIntCol checks an integer column of n values.
func checkIntCol(a arrow.Array, name string, n int) (intCol, error) {
	c := intCol{a: a}
	if err := checkArray(a, name, n); err != nil {
		return c, err
	}
	switch a := a.(type) {
	case *array.Int8:
		c.get = intGetter(a.Int8Values())
	case *array.Int16:
		c.get = intGetter(a.Int16Values())
	case *array.Int32:
		c.get = intGetter(a.Int32Values())
	case *array.Int64:
		c.get = intGetter(a.Int64Values())
	case *array.Uint8:
		c.get = intGetter(a.Uint8Values())
	case *array.Uint16:
		c.get = intGetter(a.Uint16Values())
	case *array.Uint32:
		c.get = intGetter(a.Uint32Values())
	default:
		return c, fmt.Errorf("%s: unexpected array type %T", name, a)
	}
	return c, nil
}

// floatCol is a float32 or float64 column, read as float64.
type floatCol struct {
	a   arrow.Array
	get func(i int) float64
}

func checkFloatCol(a arrow.Array, name string, n int) (floatCol, error) {
	c := floatCol{a: a}
	if err := checkArray(a, name, n); err != nil {
		return c, err
	}
	switch a := a.(type) {
	case *array.Float32:
		vals := a.Float32Values()
		c.get = func(i int) float64 { return float64(vals[i]) }
	case *array.Float64:
		vals := a.Float64Values()
		c.get = func(i int) float64 { return vals[i] }
	default:
		return c, fmt.Errorf("%s: unexpected array type %T", name, a)
	}
	return c, nil
}

// listCol is a list, large_list, list_view or large_list_view column whose element
// spans have been checked to lie inside its values.
type listCol struct {
	a      array.ListLike
	values arrow.Array
}

// span returns where row i's elements are in values (only for a valid row).
func (c listCol) span(i int) (s, e int) {
	a, b := c.a.ValueOffsets(i)
	return int(a), int(b)
}

// checkListCol checks a list column of n rows: its offsets (and sizes, for a view)
// must put every valid row's elements inside the values.
func checkListCol(a arrow.Array, name string, n int) (listCol, error) {
	var c listCol
	if err := checkArray(a, name, n); err != nil {
		return c, err
	}
	ll, ok := a.(array.ListLike)
	if !ok {
		return c, fmt.Errorf("%s: unexpected array type %T", name, a)
	}
	c.a, c.values = ll, ll.ListValues()
	childLen := c.values.Len()
	var err error
	switch a.(type) {
	case *array.List:
		_, err = checkedOffsets(a.Data(), arrow.Int32Traits.CastFromBytes, childLen)
	case *array.LargeList:
		_, err = checkedOffsets(a.Data(), arrow.Int64Traits.CastFromBytes, childLen)
	case *array.ListView:
		err = checkedViews(a, arrow.Int32Traits.CastFromBytes, childLen)
	case *array.LargeListView:
		err = checkedViews(a, arrow.Int64Traits.CastFromBytes, childLen)
	default:
		err = fmt.Errorf("unexpected array type %T", a)
	}
	if err != nil {
		return c, fmt.Errorf("%s: %w", name, err)
	}
	return c, nil
}

// checkedViews checks the offsets and sizes of a list view: each valid row's
// [offset, offset+size) lies inside the child's childLen values.
func checkedViews[T int32 | int64](a arrow.Array, cast func([]byte) []T, childLen int) error {
	d := a.Data()
	n, o := d.Len(), d.Offset()
	if n == 0 {
		return nil
	}
	bufs := d.Buffers()
	if len(bufs) < 3 || bufs[1] == nil || bufs[2] == nil {
		return errors.New("offsets or sizes buffer is missing")
	}
	offs, sizes := cast(bufs[1].Bytes()), cast(bufs[2].Bytes())
	if len(offs) < o+n || len(sizes) < o+n {
		return fmt.Errorf("offsets and sizes buffers have %d and %d values, need %d", len(offs), len(sizes), o+n)
	}
	for i := 0; i < n; i++ {
		if a.IsNull(i) {
			continue
		}
		off, size := int64(offs[o+i]), int64(sizes[o+i])
		if off < 0 || size < 0 || off > int64(childLen) || size > int64(childLen)-off {
			return fmt.Errorf("row %d's view [%d, +%d) is outside the %d values", i, off, size, childLen)
		}
	}
	return nil
}

// tokenValues holds the token ids of a batch as int32: the Arrow buffer itself for
// int32 elements, a conversion of it for int64.
type tokenValues struct {
	arr  arrow.Array // the list's values, for nulls
	vals []int32
	// bad lists, sorted, the positions in arr whose int64 id does not fit int32 (they
	// read as 0 in vals), and their ids.
	bad    []int
	badIDs []int64
}

// convertTokens returns the token ids of a list's values, converting int64 ids into
// buf (reused from batch to batch; grown when short).
func convertTokens(values arrow.Array, buf *[]int32) (tokenValues, error) {
	t := tokenValues{arr: values}
	if err := checkArray(values, "tokens values", values.Len()); err != nil {
		return t, err
	}
	switch a := values.(type) {
	case *array.Int32:
		t.vals = a.Int32Values()
	case *array.Int64:
		src := a.Int64Values()
		if cap(*buf) < len(src) {
			*buf = make([]int32, len(src))
		}
		t.vals = (*buf)[:len(src)]
		for i, v := range src {
			if v < math.MinInt32 || v > math.MaxInt32 {
				if a.IsValid(i) {
					t.bad, t.badIDs = append(t.bad, i), append(t.badIDs, v)
				}
				v = 0
			}
			t.vals[i] = int32(v)
		}
	default:
		return t, fmt.Errorf("tokens values: unexpected array type %T", values)
	}
	return t, nil
}

// outOfInt32 returns the first position in [s, e) whose id does not fit int32, its
// id, and how many there are.
func (t *tokenValues) outOfInt32(s, e int) (first int, id int64, count int) {
	k := sort.SearchInts(t.bad, s)
	for j := k; j < len(t.bad) && t.bad[j] < e; j++ {
		count++
	}
	if count == 0 {
		return -1, 0, 0
	}
	return t.bad[k], t.badIDs[k], count
}

// convertLogProbs returns the log-probs of a list's values as float32: the Arrow
// buffer itself, or float64 values rounded into buf.
func convertLogProbs(values arrow.Array, buf *[]float32) ([]float32, error) {
	if err := checkArray(values, "logprobs values", values.Len()); err != nil {
		return nil, err
	}
	switch a := values.(type) {
	case *array.Float32:
		return a.Float32Values(), nil
	case *array.Float64:
		src := a.Float64Values()
		if cap(*buf) < len(src) {
			*buf = make([]float32, len(src))
		}
		out := (*buf)[:len(src)]
		for i, v := range src {
			out[i] = float32(v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("logprobs values: unexpected array type %T", values)
}

// checkArray checks that a has n elements and a validity bitmap that covers them.
func checkArray(a arrow.Array, name string, n int) error {
	if a == nil {
		return fmt.Errorf("%s is missing", name)
	}
	if a.Len() != n {
		return fmt.Errorf("%s has %d values, want %d", name, a.Len(), n)
	}
	if err := checkBitmap(a); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// checkBitmap checks that a's validity bitmap, if it has one, covers its elements.
func checkBitmap(a arrow.Array) error {
	bm := a.NullBitmapBytes()
	if len(bm) == 0 {
		return nil
	}
	if need := (a.Data().Offset() + a.Len() + 7) / 8; len(bm) < need {
		return fmt.Errorf("validity bitmap has %d bytes, needs %d", len(bm), need)
	}
	return nil
}

func checkedOffsets[T int32 | int64](d arrow.ArrayData, cast func([]byte) []T, childLen int) ([]T, error) {
	n, o := d.Len(), d.Offset()
	if n == 0 {
		return nil, nil
	}
	buf := d.Buffers()[1]
	if buf == nil {
		return nil, errors.New("offsets buffer is missing")
	}
	raw := cast(buf.Bytes())
	if len(raw) < o+n+1 {
		return nil, fmt.Errorf("offsets buffer has %d offsets, needs %d", len(raw), o+n+1)
	}
	off := raw[o : o+n+1]
	if off[0] < 0 {
		return nil, fmt.Errorf("first offset %d is negative", off[0])
	}
	for i := 1; i <= n; i++ {
		if off[i] < off[i-1] {
			return nil, fmt.Errorf("offsets decrease at element %d: %d < %d", i, off[i], off[i-1])
		}
	}
	if int64(off[n]) > int64(childLen) {
		return nil, fmt.Errorf("last offset %d is beyond the %d values", off[n], childLen)
	}
	return off, nil
}
