package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Dtype is a safetensors element type, spelled as in the file header ("F32", "BF16").
type Dtype string

// The dtypes hindsight reads. F32, F16 and BF16 convert to float32; the others are
// readable as raw bytes only.
const (
	DtypeBool   Dtype = "BOOL"
	DtypeU8     Dtype = "U8"
	DtypeI8     Dtype = "I8"
	DtypeF8E5M2 Dtype = "F8_E5M2"
	DtypeF8E4M3 Dtype = "F8_E4M3"
	DtypeF8E8M0 Dtype = "F8_E8M0"
	DtypeI16    Dtype = "I16"
	DtypeU16    Dtype = "U16"
	DtypeF16    Dtype = "F16"
	DtypeBF16   Dtype = "BF16"
	DtypeI32    Dtype = "I32"
	DtypeU32    Dtype = "U32"
	DtypeF32    Dtype = "F32"
	DtypeC64    Dtype = "C64"
	DtypeF64    Dtype = "F64"
	DtypeI64    Dtype = "I64"
	DtypeU64    Dtype = "U64"
)

// dtypeInfo gives each known dtype its element size in bytes and its rank in the
// reference implementation's Dtype enum, whose order (increasing alignment) decides
// the order in which the reference writer lays tensors out.
var dtypeInfo = map[Dtype]struct{ size, rank int }{
	DtypeBool: {1, 0}, DtypeU8: {1, 4}, DtypeI8: {1, 5},
	DtypeF8E5M2: {1, 6}, DtypeF8E4M3: {1, 7}, DtypeF8E8M0: {1, 8},
	DtypeI16: {2, 9}, DtypeU16: {2, 10}, DtypeF16: {2, 11}, DtypeBF16: {2, 12},
	DtypeI32: {4, 13}, DtypeU32: {4, 14}, DtypeF32: {4, 15}, DtypeC64: {8, 16},
	DtypeF64: {8, 17}, DtypeI64: {8, 18}, DtypeU64: {8, 19},
}

// Size is the size of one element in bytes, or 0 for a dtype hindsight does not know
// (including the sub-byte F4 and F6 types).
func (d Dtype) Size() int { return dtypeInfo[d].size }

// IsFloat reports whether the dtype converts to float32 (F32, F16, BF16).
func (d Dtype) IsFloat() bool { return d == DtypeF32 || d == DtypeF16 || d == DtypeBF16 }

// maxHeaderSize is the reference implementation's limit on the JSON header (100 MB).
const maxHeaderSize = 100_000_000

// TensorView is one tensor of a safetensors file. Data is the raw little-endian,
// row-major bytes; for a tensor of an opened file it points into the read-only
// memory mapping: never write to it, and do not use it after the file's Close.
type TensorView struct {
	Name  string
	Dtype Dtype
	Shape []int
	Data  []byte
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorView) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32s returns the tensor's values as float32. For F32 on a little-endian
// machine with 4-byte aligned data it is the mapping itself, without a copy: the
// slice is read-only (writing to it faults) and valid until the file is closed.
// Otherwise (F16, BF16, or unaligned F32) it returns a new slice.
func (t TensorView) Float32s() ([]float32, error) {
	if t.Dtype == DtypeF32 && nativeLittleEndian && len(t.Data) > 0 &&
		uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
		return unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4), nil
	}
	out := make([]float32, t.NumElements())
	if err := t.CopyFloat32s(out); err != nil {
		return nil, err
	}
	return out, nil
}

// CopyFloat32s converts the tensor's values into dst, which must have exactly
// NumElements() elements. F32 is copied, F16 and BF16 are widened exactly
// (subnormals, ±Inf, NaN and −0 included).
func (t TensorView) CopyFloat32s(dst []float32) error {
	if !t.Dtype.IsFloat() {
		return fmt.Errorf("convert tensor %s: dtype %s does not convert to float32 (want F32, F16 or BF16)", t.Name, t.Dtype)
	}
	if len(dst) != t.NumElements() || len(t.Data) != len(dst)*t.Dtype.Size() {
		return fmt.Errorf("convert tensor %s: %d destination values for %d elements of %s in %d bytes",
			t.Name, len(dst), t.NumElements(), t.Dtype, len(t.Data))
	}
	b := t.Data
	switch t.Dtype {
	case DtypeF32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	case DtypeBF16:
		for i := range dst {
			dst[i] = BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	case DtypeF16:
		for i := range dst {
			dst[i] = F16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
		}
	}
	return nil
}

var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// BF16ToFloat32 widens a bfloat16 (its bits) to float32; exact.
func BF16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Float32ToBF16 rounds f to the nearest bfloat16, ties to even, as PyTorch and
// ml_dtypes do. NaN stays NaN (quieted, sign kept); overflow rounds to ±Inf.
func Float32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign and top payload bits, force quiet
		return uint16(b>>16) | 0x0040
	}
	// Add 0x7fff plus the lowest kept bit: rounds to nearest, ties to even. A carry
	// out of the mantissa correctly bumps the exponent (up to Inf).
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// F16ToFloat32 widens an IEEE 754 half (its bits) to float32; exact, subnormals
// included. NaN payloads are kept.
func F16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // ±0
		return math.Float32frombits(sign)
	}
	// Subnormal half: man·2^-24, which is a normal float32.
	e := uint32(113) // exponent of 2^-14, biased for float32
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// Float32ToF16 rounds f to the nearest IEEE 754 half, ties to even, as numpy and
// PyTorch do: values beyond the half range become ±Inf, tiny values become
// subnormals or ±0, NaN stays NaN (quieted, sign kept).
func Float32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15 // biased half exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal or zero: the result is round(m · 2^(e-1-10+...)); shift the full
		// 24-bit significand right so that units are 2^-24.
		if e < -10 {
			return sign // below half the smallest subnormal (2^-25): rounds to ±0
		}
		m := man | 0x800000
		shift := uint32(14 - e) // 13 for the mantissa width gap, plus 1-e
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++ // may carry into the smallest normal, which is the right answer
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, up to Inf: correct
	}
	return sign | uint16(r)
}

// tensorEntry is one header entry: the tensor's dtype, shape and data range.
type tensorEntry struct {
	dtype      Dtype
	shape      []int
	begin, end int // offsets into the data section
}

// File is an opened safetensors file: the header parsed and validated,
// the whole file memory-mapped read-only. Tensor data is not read until used.
// Methods are safe for concurrent use until Close.
type File struct {
	path     string
	buf      []byte // the whole file
	mapped   bool   // buf is an mmap that Close unmaps
	data     []byte // buf[8+N:]
	tensors  map[string]tensorEntry
	names    []string
	metadata map[string]string
}

// Open memory-maps the safetensors file at path and validates its header
// as the reference implementation does (and also rejects duplicate names). The
// caller must Close it.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("%s: file has %d bytes, shorter than the 8-byte header length", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%s: file too large to map (%d bytes)", path, size)
	}
	buf, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map safetensors %s: %w", path, err)
	}
	sf, err := parseSafetensors(path, buf)
	if err != nil {
		unix.Munmap(buf)
		return nil, err
	}
	sf.mapped = true
	return sf, nil
}

// parseSafetensors parses and validates a whole safetensors file held in b. name
// prefixes error messages. The result's views point into b.
func parseSafetensors(name string, b []byte) (*File, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: "+format, append([]any{name}, args...)...)
	}
	if len(b) < 8 {
		return nil, fail("file has %d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeaderSize {
		return nil, fail("header length %d exceeds the limit of %d bytes", n, maxHeaderSize)
	}
	if n > uint64(len(b)-8) {
		return nil, fail("header length %d exceeds the %d bytes after the length field", n, len(b)-8)
	}
	header := b[8 : 8+n]
	data := b[8+n:]
	if !utf8.Valid(header) {
		return nil, fail("header is not valid UTF-8")
	}
	entries, metadata, err := decodeHeader(header)
	if err != nil {
		return nil, fail("header: %v", err)
	}
	sf := &File{path: name, buf: b, data: data, tensors: make(map[string]tensorEntry, len(entries)), metadata: metadata}
	for _, e := range entries {
		sf.tensors[e.name] = e.entry
		sf.names = append(sf.names, e.name)
	}
	// The reference sorts by data_offsets and requires them to tile [0, len(data))
	// exactly: each begins where the previous ended, the last ends at the file's end.
	order := slices.Clone(entries)
	slices.SortStableFunc(order, func(a, b namedEntry) int {
		if c := a.entry.begin - b.entry.begin; c != 0 {
			return c
		}
		return a.entry.end - b.entry.end
	})
	pos := 0
	for _, e := range order {
		t := e.entry
		if t.begin != pos {
			if t.begin < pos {
				return nil, fail("tensor %s: data_offsets [%d, %d) overlap the previous tensor, which ends at %d", e.name, t.begin, t.end, pos)
			}
			return nil, fail("tensor %s: data_offsets [%d, %d) leave a gap after offset %d", e.name, t.begin, t.end, pos)
		}
		if t.end < t.begin {
			return nil, fail("tensor %s: data_offsets [%d, %d) end before they begin", e.name, t.begin, t.end)
		}
		nbytes, ok := byteSize(t.dtype, t.shape)
		if !ok {
			return nil, fail("tensor %s: shape %s of %s overflows", e.name, ShapeString(t.shape), t.dtype)
		}
		if t.end-t.begin != nbytes {
			return nil, fail("tensor %s: data_offsets [%d, %d) hold %d bytes, shape %s of %s needs %d",
				e.name, t.begin, t.end, t.end-t.begin, ShapeString(t.shape), t.dtype, nbytes)
		}
		if t.end > len(data) {
			return nil, fail("tensor %s: data_offsets [%d, %d) run past the data section of %d bytes", e.name, t.begin, t.end, len(data))
		}
		pos = t.end
	}
	if pos != len(data) {
		return nil, fail("tensors cover %d bytes of the %d-byte data section", pos, len(data))
	}
	slices.Sort(sf.names)
	return sf, nil
}

// byteSize is the number of bytes of a tensor of dtype and shape, false on overflow.
func byteSize(dtype Dtype, shape []int) (int, bool) {
	n := dtype.Size()
	for _, d := range shape {
		if d != 0 && n > math.MaxInt/d {
			return 0, false
		}
		n *= d
	}
	return n, true
}

type namedEntry struct {
	name  string
	entry tensorEntry
}

// decodeHeader parses the JSON header: an object whose keys are tensor names (each
// {"dtype", "shape", "data_offsets"}) plus the optional "__metadata__" string map.
// Keys are matched exactly (encoding/json would match them case-insensitively),
// duplicates are errors, and only whitespace may follow the object.
func decodeHeader(header []byte) ([]namedEntry, map[string]string, error) {
	dec := json.NewDecoder(bytes.NewReader(header))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, nil, fmt.Errorf("not a JSON object")
	}
	var entries []namedEntry
	var metadata map[string]string
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, fmt.Errorf("parse JSON: %w", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, nil, fmt.Errorf("parse JSON: key %v is not a string", tok)
		}
		if seen[key] {
			return nil, nil, fmt.Errorf("key %q appears twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, nil, fmt.Errorf("parse JSON at key %q: %w", key, err)
		}
		if key == "__metadata__" {
			if err := json.Unmarshal(raw, &metadata); err != nil {
				return nil, nil, fmt.Errorf("__metadata__: want an object of strings: %w", err)
			}
			continue
		}
		e, err := decodeTensorInfo(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("tensor %s: %w", key, err)
		}
		entries = append(entries, namedEntry{key, e})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, nil, fmt.Errorf("parse JSON: %w", err)
	}
	if rest := header[dec.InputOffset():]; len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, nil, fmt.Errorf("data after the JSON object at byte %d", dec.InputOffset())
	}
	return entries, metadata, nil
}

// decodeTensorInfo parses {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}.
// Unknown keys are ignored, as in the reference.
func decodeTensorInfo(raw json.RawMessage) (tensorEntry, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return tensorEntry{}, fmt.Errorf("want an object with dtype, shape and data_offsets")
	}
	var e tensorEntry
	for _, k := range []string{"dtype", "shape", "data_offsets"} {
		if _, ok := fields[k]; !ok {
			return e, fmt.Errorf("%s is missing", k)
		}
	}
	var dtype string
	if err := json.Unmarshal(fields["dtype"], &dtype); err != nil {
		return e, fmt.Errorf("dtype: want a string")
	}
	e.dtype = Dtype(dtype)
	if e.dtype.Size() == 0 {
		return e, fmt.Errorf("dtype %q is unknown or unsupported", dtype)
	}
	var shape []uint64
	if err := json.Unmarshal(fields["shape"], &shape); err != nil || (shape == nil && !bytes.Equal(bytes.TrimSpace(fields["shape"]), []byte("[]"))) {
		return e, fmt.Errorf("shape: want a list of non-negative integers")
	}
	e.shape = make([]int, len(shape))
	for i, d := range shape {
		if d > math.MaxInt {
			return e, fmt.Errorf("shape %v: dimension %d too large", shape, i)
		}
		e.shape[i] = int(d)
	}
	var offs []uint64
	if err := json.Unmarshal(fields["data_offsets"], &offs); err != nil || len(offs) != 2 {
		return e, fmt.Errorf("data_offsets: want [begin, end] of non-negative integers")
	}
	if offs[0] > math.MaxInt || offs[1] > math.MaxInt {
		return e, fmt.Errorf("data_offsets %v too large", offs)
	}
	e.begin, e.end = int(offs[0]), int(offs[1])
	return e, nil
}

// Path is the file the tensors were read from.
func (f *File) Path() string { return f.path }

// Names returns the tensor names, sorted.
func (f *File) Names() []string { return slices.Clone(f.names) }

// Tensor returns the named tensor's view; its Data aliases the mapping.
func (f *File) Tensor(name string) (TensorView, error) {
	e, ok := f.tensors[name]
	if !ok {
		return TensorView{}, fmt.Errorf("%s: no tensor %s", f.path, name)
	}
	return TensorView{Name: name, Dtype: e.dtype, Shape: slices.Clone(e.shape), Data: f.data[e.begin:e.end:e.end]}, nil
}

// Metadata returns a copy of the header's "__metadata__" (nil when absent).
func (f *File) Metadata() map[string]string { return maps.Clone(f.metadata) }

// Close unmaps the file. Views and zero-copy slices must not be used after it.
func (f *File) Close() error {
	if !f.mapped || f.buf == nil {
		return nil
	}
	buf := f.buf
	f.buf, f.data = nil, nil
	if err := unix.Munmap(buf); err != nil {
		return fmt.Errorf("unmap %s: %w", f.path, err)
	}
	return nil
}

// Names of the files of a Hugging Face model's weights.
const (
	FileName      = "model.safetensors"
	IndexFileName = "model.safetensors.index.json"
)

// Dir is the weights of a model directory, one file or sharded, seen as
// one table from tensor name to view.
type Dir struct {
	dir      string
	files    []*File
	byName   map[string]*File
	names    []string
	metadata map[string]string
}

// safetensorsIndex is model.safetensors.index.json.
type safetensorsIndex struct {
	Metadata  map[string]json.RawMessage `json:"metadata"`
	WeightMap map[string]string          `json:"weight_map"`
}

// OpenDir opens the weights in dir: model.safetensors if present (as
// transformers prefers it), else the shards that model.safetensors.index.json
// lists. Every weight_map entry must name a shard in dir that holds the tensor, and
// every tensor of a shard must be mapped to that shard. The caller must Close it.
func OpenDir(dir string) (*Dir, error) {
	single := filepath.Join(dir, FileName)
	if _, err := os.Stat(single); err == nil {
		f, err := Open(single)
		if err != nil {
			return nil, err
		}
		d := &Dir{dir: dir, files: []*File{f}, byName: map[string]*File{}, names: f.Names(), metadata: f.Metadata()}
		for _, n := range d.names {
			d.byName[n] = f
		}
		return d, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open weights: %w", err)
	}
	indexPath := filepath.Join(dir, IndexFileName)
	raw, err := os.ReadFile(indexPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open weights in %s: neither %s nor %s exists", dir, FileName, IndexFileName)
	} else if err != nil {
		return nil, fmt.Errorf("open weights: %w", err)
	}
	var idx safetensorsIndex
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, fmt.Errorf("%s: parse: %w", indexPath, err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("%s: weight_map is missing or empty", indexPath)
	}
	d := &Dir{dir: dir, byName: make(map[string]*File, len(idx.WeightMap))}
	if len(idx.Metadata) > 0 {
		d.metadata = make(map[string]string, len(idx.Metadata))
		for k, v := range idx.Metadata {
			var s string
			if json.Unmarshal(v, &s) != nil {
				s = string(v) // total_size is a number: keep its JSON text
			}
			d.metadata[k] = s
		}
	}
	shards := map[string]*File{}
	for _, name := range slices.Sorted(maps.Keys(idx.WeightMap)) {
		file := idx.WeightMap[name]
		if file == "" || file != filepath.Base(file) || file == "." || file == ".." {
			d.Close()
			return nil, fmt.Errorf("%s: weight_map: tensor %s: file %q is not a file name in the directory", indexPath, name, file)
		}
		f, ok := shards[file]
		if !ok {
			f, err = Open(filepath.Join(dir, file))
			if err != nil {
				d.Close()
				return nil, fmt.Errorf("%s: weight_map: tensor %s: %w", indexPath, name, err)
			}
			shards[file] = f
			d.files = append(d.files, f)
		}
		if _, ok := f.tensors[name]; !ok {
			d.Close()
			return nil, fmt.Errorf("%s: weight_map puts tensor %s in %s, which does not hold it", indexPath, name, file)
		}
		d.byName[name] = f
		d.names = append(d.names, name)
	}
	for _, f := range d.files {
		for _, name := range f.names {
			if d.byName[name] != f {
				where := "is not in the weight_map"
				if g := d.byName[name]; g != nil {
					where = "is mapped to " + filepath.Base(g.path)
				}
				d.Close()
				return nil, fmt.Errorf("%s: tensor %s of %s %s", indexPath, name, filepath.Base(f.path), where)
			}
		}
	}
	return d, nil
}

// Dir is the directory the weights were read from.
func (d *Dir) Dir() string { return d.dir }

// Files returns the paths of the opened safetensors files.
func (d *Dir) Files() []string {
	out := make([]string, len(d.files))
	for i, f := range d.files {
		out[i] = f.path
	}
	return out
}

// Names returns all tensor names, sorted.
func (d *Dir) Names() []string { return slices.Clone(d.names) }

// Tensor returns the named tensor's view, from whichever file holds it.
func (d *Dir) Tensor(name string) (TensorView, error) {
	f, ok := d.byName[name]
	if !ok {
		return TensorView{}, fmt.Errorf("weights in %s: no tensor %s", d.dir, name)
	}
	return f.Tensor(name)
}

// Metadata returns the single file's "__metadata__", or for sharded weights the
// index's "metadata" (non-string values such as total_size as their JSON text).
func (d *Dir) Metadata() map[string]string { return maps.Clone(d.metadata) }

// Close unmaps every file.
func (d *Dir) Close() error {
	var errs []error
	for _, f := range d.files {
		errs = append(errs, f.Close())
	}
	return errors.Join(errs...)
}

// ShapeString formats a shape as [a, b].
func ShapeString(shape []int) string {
	s := make([]string, len(shape))
	for i, d := range shape {
		s[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(s, ", ") + "]"
}
