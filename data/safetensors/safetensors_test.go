package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/safetensors/go_written.* (and run check.py to record its output)")

const goldenPath = "testdata/safetensors/golden.safetensors"

func bitsOf(v []float32) []uint32 {
	out := make([]uint32, len(v))
	for i, f := range v {
		out[i] = math.Float32bits(f)
	}
	return out
}

func uint16s(b []byte) []uint16 {
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(b[2*i:])
	}
	return out
}

// TestSafetensorsGolden reads the file Python's safetensors wrote (gen.py) and checks
// every value, and that Go's float32 → F16/BF16 casts equal numpy's and ml_dtypes'.
func TestSafetensorsGolden(t *testing.T) {
	f, err := Open(goldenPath)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, []string{"bytes_u8", "empty_f16", "ids_i32", "ids_i64", "mask_bool", "matrix_f32",
		"round_bf16", "round_f16", "round_src", "scalar_f32", "special_bf16", "special_f16", "special_f32"}, f.Names())
	require.Equal(t, map[string]string{"format": "pt", "source": "gen.py"}, f.Metadata())

	get := func(name string) TensorView {
		v, err := f.Tensor(name)
		require.NoError(t, err)
		return v
	}
	for _, p := range [][2]string{{"special_f32", "special"}, {"round_src", "round"}} {
		src := get(p[0])
		require.Equal(t, DtypeF32, src.Dtype)
		vals, err := src.Float32s()
		require.NoError(t, err)
		require.Equal(t, unsafe.Pointer(&src.Data[0]), unsafe.Pointer(&vals[0]), "F32 from a mapping is zero-copy")

		f16, bf16 := get(p[1]+"_f16"), get(p[1]+"_bf16")
		require.Equal(t, DtypeF16, f16.Dtype)
		require.Equal(t, DtypeBF16, bf16.Dtype)
		wantF16, wantBF16 := uint16s(f16.Data), uint16s(bf16.Data)
		for i, v := range vals {
			require.Equalf(t, wantF16[i], Float32ToF16(v), "%s[%d] = %#08x to F16", p[0], i, math.Float32bits(v))
			require.Equalf(t, wantBF16[i], Float32ToBF16(v), "%s[%d] = %#08x to BF16", p[0], i, math.Float32bits(v))
		}
		// Widening: compare with the float64 value of each half.
		for _, tv := range []TensorView{f16, bf16} {
			got, err := tv.Float32s()
			require.NoError(t, err)
			for i, h := range uint16s(tv.Data) {
				want := refWiden(tv.Dtype, h)
				require.Equalf(t, math.Float32bits(want), math.Float32bits(got[i]), "%s[%d] = %#04x", tv.Name, i, h)
			}
		}
	}

	m := get("matrix_f32")
	require.Equal(t, []int{3, 4}, m.Shape)
	mv, err := m.Float32s()
	require.NoError(t, err)
	for i, v := range mv {
		require.Equal(t, float32(i)/4-1, v)
	}
	s := get("scalar_f32")
	require.Equal(t, []int{}, s.Shape)
	require.Equal(t, 1, s.NumElements())
	sv, err := s.Float32s()
	require.NoError(t, err)
	require.Equal(t, []float32{3.5}, sv)
	e := get("empty_f16")
	require.Equal(t, []int{0, 3}, e.Shape)
	ev, err := e.Float32s()
	require.NoError(t, err)
	require.Empty(t, ev)

	ids := get("ids_i32")
	require.Equal(t, DtypeI32, ids.Dtype)
	require.Equal(t, int32(-1), int32(binary.LittleEndian.Uint32(ids.Data[8:])))
	require.Equal(t, int64(1)<<40, int64(binary.LittleEndian.Uint64(get("ids_i64").Data)))
	require.Equal(t, []byte{0, 127, 255}, get("bytes_u8").Data)
	require.Equal(t, []byte{1, 0, 0, 1}, get("mask_bool").Data)
	_, err = ids.Float32s()
	require.ErrorContains(t, err, "dtype I32 does not convert to float32")
	_, err = f.Tensor("nope")
	require.ErrorContains(t, err, "no tensor nope")
}

// refWiden is an independent F16/BF16 → float32 widening through float64 arithmetic.
func refWiden(d Dtype, h uint16) float32 {
	expBits, manBits, bias := 5, 10, 15
	if d == DtypeBF16 {
		expBits, manBits, bias = 8, 7, 127
	}
	sign := 1.0
	if h>>15 == 1 {
		sign = -1
	}
	exp := int(h>>manBits) & (1<<expBits - 1)
	man := float64(h & (1<<manBits - 1))
	switch {
	case exp == 1<<expBits-1 && man == 0:
		return float32(math.Inf(int(sign)))
	case exp == 1<<expBits-1: // NaN: the payload moves to the top of float32's mantissa
		return math.Float32frombits(uint32(h>>15)<<31 | 0x7f800000 | uint32(man)<<(23-manBits))
	case exp == 0:
		return float32(sign * math.Ldexp(man, 1-bias-manBits))
	}
	return float32(sign * math.Ldexp(1+man/float64(int(1)<<manBits), exp-bias))
}

// TestHalfConversionsExhaustive widens every F16 and BF16 bit pattern, compares with
// the float64 reference, and checks that narrowing the result gives the pattern back.
func TestHalfConversionsExhaustive(t *testing.T) {
	for h := range 1 << 16 {
		h := uint16(h)
		f := F16ToFloat32(h)
		require.Equal(t, math.Float32bits(refWiden(DtypeF16, h)), math.Float32bits(f), "F16 %#04x", h)
		b := BF16ToFloat32(h)
		require.Equal(t, math.Float32bits(refWiden(DtypeBF16, h)), math.Float32bits(b), "BF16 %#04x", h)
		// Narrowing gives the pattern back; a NaN stays NaN with its sign and
		// payload, the quiet bit set.
		if f == f {
			require.Equal(t, h, Float32ToF16(f), "F16 %#04x round trip", h)
		} else {
			require.Equal(t, h|0x0200, Float32ToF16(f), "F16 NaN %#04x", h)
		}
		if b == b {
			require.Equal(t, h, Float32ToBF16(b), "BF16 %#04x round trip", h)
		} else {
			require.Equal(t, h|0x0040, Float32ToBF16(b), "BF16 NaN %#04x", h)
		}
	}
}

// TestSafetensorsRewriteMatchesPython writes the golden file's tensors back with
// Write and expects the very bytes Python wrote.
func TestSafetensorsRewriteMatchesPython(t *testing.T) {
	want, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	f, err := Open(goldenPath)
	require.NoError(t, err)
	defer f.Close()
	var tensors []NamedTensor
	for _, name := range f.Names() {
		v, err := f.Tensor(name)
		require.NoError(t, err)
		tensors = append(tensors, NamedTensor{Name: v.Name, Dtype: v.Dtype, Shape: v.Shape, Raw: v.Data})
	}
	out := filepath.Join(t.TempDir(), "rewrite.safetensors")
	require.NoError(t, Write(out, tensors, f.Metadata()))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, string(want[:8+binary.LittleEndian.Uint64(want)]), string(got[:8+binary.LittleEndian.Uint64(got)]), "header")
	require.True(t, bytes.Equal(want, got), "data section differs")
}

// goWrittenTensors are the tensors of go_written.safetensors, which check.py reads.
func goWrittenTensors() []NamedTensor {
	src := []float32{0, float32(math.Copysign(0, -1)), 1, -1, float32(math.Pi), float32(math.Inf(1)), float32(math.Inf(-1)),
		float32(math.NaN()), math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, 65504, 65520, 0x1p-24, 0x1p-25, 0x1p-14}
	// Deterministic values across float16's and bfloat16's ranges (splitmix64 bits).
	state := uint64(20261202)
	for range 4096 {
		state += 0x9e3779b97f4a7c15
		z := state
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		z ^= z >> 31
		exp := uint32(100 + z%50)
		bits := uint32(z>>32)&0x807fffff | exp<<23
		if z&0x300 == 0 {
			bits = bits&^0x1fff | 0x1000 // a float16 tie
		}
		src = append(src, math.Float32frombits(bits))
	}
	return []NamedTensor{
		{Name: "src", Dtype: DtypeF32, Shape: []int{len(src)}, Values: src},
		{Name: "src_bf16", Dtype: DtypeBF16, Shape: []int{len(src)}, Values: src},
		{Name: "src_f16", Dtype: DtypeF16, Shape: []int{len(src)}, Values: src},
		{Name: "matrix", Dtype: DtypeF32, Shape: []int{2, 3}, Values: []float32{0, 0.5, 1, 1.5, 2, 2.5}},
		{Name: "empty", Dtype: DtypeBF16, Shape: []int{0, 4}},
	}
}

// TestSafetensorsPythonReadsBack writes go_written.safetensors, checks it equals the
// committed copy, and has Python's safetensors read and check it (check.py) when
// python3 with safetensors, numpy and ml_dtypes is available. -update rewrites the
// committed file and go_written.check.txt, check.py's recorded output.
func TestSafetensorsPythonReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "go_written.safetensors")
	require.NoError(t, Write(path, goWrittenTensors(), map[string]string{"format": "pt", "writer": "hindsight"}))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	committed := "testdata/safetensors/go_written.safetensors"
	if *update {
		require.NoError(t, os.WriteFile(committed, got, 0o644))
	}
	want, err := os.ReadFile(committed)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "Write no longer writes the bytes of %s (run with -update if intended)", committed)

	// Go reads its own file back.
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	for _, nt := range goWrittenTensors() {
		v, err := f.Tensor(nt.Name)
		require.NoError(t, err)
		require.Equal(t, nt.Shape, v.Shape)
		vals, err := v.Float32s()
		require.NoError(t, err)
		for i, x := range nt.Values {
			var w float32
			switch nt.Dtype {
			case DtypeF32:
				w = x
			case DtypeBF16:
				w = BF16ToFloat32(Float32ToBF16(x))
			case DtypeF16:
				w = F16ToFloat32(Float32ToF16(x))
			}
			require.Equal(t, math.Float32bits(w), math.Float32bits(vals[i]), "%s[%d]", nt.Name, i)
		}
	}

	python, reason := pythonWithSafetensors()
	if python == "" {
		t.Skipf("python check skipped: %s (its recorded output is testdata/safetensors/go_written.check.txt)", reason)
	}
	out, err := exec.Command(python, "testdata/safetensors/check.py", path).CombinedOutput()
	require.NoError(t, err, "check.py:\n%s", out)
	require.True(t, strings.HasSuffix(string(out), "OK\n"), "check.py:\n%s", out)
	t.Logf("check.py:\n%s", out)
	if *update {
		require.NoError(t, os.WriteFile("testdata/safetensors/go_written.check.txt",
			[]byte("$ python3 data/safetensors/testdata/safetensors/check.py go_written.safetensors\n"+string(out)), 0o644))
	}
}

// pythonWithSafetensors returns a python3 that imports safetensors, numpy and
// ml_dtypes, or "" and why not.
func pythonWithSafetensors() (string, string) {
	python, err := exec.LookPath("python3")
	if err != nil {
		return "", "no python3 on PATH"
	}
	if out, err := exec.Command(python, "-c", "import safetensors, numpy, ml_dtypes").CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return "", python + " cannot import safetensors, numpy and ml_dtypes (" + lines[len(lines)-1] + "); pip install safetensors numpy ml_dtypes"
	}
	return python, ""
}

// stFile builds a safetensors file from a header string and a data section.
func stFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

func TestParseSafetensorsErrors(t *testing.T) {
	ok := `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}`
	_, err := parseSafetensors("x.safetensors", stFile(ok, make([]byte, 12)))
	require.NoError(t, err)

	long := binary.LittleEndian.AppendUint64(nil, 1000)
	huge := binary.LittleEndian.AppendUint64(nil, 200_000_000)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "x.safetensors: file has 3 bytes, shorter than the 8-byte header length"},
		{"header past end", append(long, "{}"...), "header length 1000 exceeds the 2 bytes after the length field"},
		{"header too large", huge, "header length 200000000 exceeds the limit"},
		{"not utf8", stFile("{\"\xff\":1}", nil), "header is not valid UTF-8"},
		{"not json", stFile("{nope", nil), "x.safetensors: header: parse JSON"},
		{"not object", stFile("[]", nil), "header: not a JSON object"},
		{"trailing", stFile("{} {}", nil), "data after the JSON object"},
		{"duplicate", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), `key "a" appears twice`},
		{"unknown dtype", stFile(`{"a":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, make([]byte, 1)), `tensor a: dtype "F4" is unknown or unsupported`},
		{"missing field", stFile(`{"a":{"dtype":"U8","shape":[1]}}`, make([]byte, 1)), "tensor a: data_offsets is missing"},
		{"case matters", stFile(`{"a":{"DTYPE":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), "tensor a: dtype is missing"},
		{"negative dim", stFile(`{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}`, make([]byte, 1)), "tensor a: shape: want a list of non-negative integers"},
		{"float dim", stFile(`{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}`, make([]byte, 1)), "tensor a: shape: want"},
		{"three offsets", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, make([]byte, 1)), "data_offsets: want [begin, end]"},
		{"metadata not strings", stFile(`{"__metadata__":{"n":1}}`, nil), "__metadata__: want an object of strings"},
		{"size mismatch", stFile(`{"model.embed_tokens.weight":{"dtype":"BF16","shape":[10,4],"data_offsets":[0,100]}}`, make([]byte, 100)),
			"x.safetensors: tensor model.embed_tokens.weight: data_offsets [0, 100) hold 100 bytes, shape [10, 4] of BF16 needs 80"},
		{"gap", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), "tensor a: data_offsets [1, 2) leave a gap after offset 0"},
		{"overlap", stFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, make([]byte, 2)), "overlap the previous tensor"},
		{"reversed", stFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}`, make([]byte, 1)), "gap after offset 0"},
		{"past end", stFile(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}}`, make([]byte, 2)), "run past the data section of 2 bytes"},
		{"uncovered", stFile(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, make([]byte, 3)), "tensors cover 1 bytes of the 3-byte data section"},
		{"overflow", stFile(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, make([]byte, 1)), "shape [4294967296, 4294967296] of F64 overflows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseSafetensors("x.safetensors", tt.file)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestOpenSafetensorsFileErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := Open(filepath.Join(dir, "missing.safetensors"))
	require.ErrorIs(t, err, os.ErrNotExist)
	empty := filepath.Join(dir, "empty.safetensors")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	_, err = Open(empty)
	require.ErrorContains(t, err, "empty.safetensors: file has 0 bytes")
	// A file with an empty header and no tensors is valid.
	ok := filepath.Join(dir, "ok.safetensors")
	require.NoError(t, Write(ok, nil, nil))
	raw, err := os.ReadFile(ok)
	require.NoError(t, err)
	require.Equal(t, []byte{8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '}, raw) // as the reference writes it
	f, err := Open(ok)
	require.NoError(t, err)
	require.Empty(t, f.Names())
	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "Close twice")
}

func TestWriteSafetensorsErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.safetensors")
	tests := []struct {
		name string
		t    []NamedTensor
		want string
	}{
		{"short values", []NamedTensor{{Name: "a", Dtype: DtypeF32, Shape: []int{2, 2}, Values: []float32{1}}}, "tensor a: 1 values, shape [2, 2] needs 4"},
		{"short raw", []NamedTensor{{Name: "a", Dtype: DtypeI64, Shape: []int{2}, Raw: []byte{1}}}, "tensor a: 1 raw bytes, shape [2] of I64 needs 16"},
		{"both", []NamedTensor{{Name: "a", Dtype: DtypeF32, Shape: []int{1}, Values: []float32{1}, Raw: make([]byte, 4)}}, "both Values and Raw"},
		{"values to int", []NamedTensor{{Name: "a", Dtype: DtypeI32, Shape: []int{1}, Values: []float32{1}}}, "not I32 (use Raw)"},
		{"dup", []NamedTensor{{Name: "a", Dtype: DtypeF32, Shape: []int{}, Values: []float32{1}}, {Name: "a", Dtype: DtypeBF16, Shape: []int{}, Values: []float32{1}}}, "tensor a: name appears twice"},
		{"reserved", []NamedTensor{{Name: "__metadata__", Dtype: DtypeF32, Shape: []int{}, Values: []float32{1}}}, "reserved"},
		{"dtype", []NamedTensor{{Name: "a", Dtype: "F12", Shape: []int{}}}, `unknown dtype "F12"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Write(path, tt.t, nil)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, "write safetensors "+path)
			_, statErr := os.Stat(path)
			require.ErrorIs(t, statErr, os.ErrNotExist, "nothing is left behind")
			entries, _ := os.ReadDir(filepath.Dir(path))
			require.Empty(t, entries, "no temp file is left behind")
		})
	}
}

func TestSafetensorsHeaderEscapes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.safetensors")
	name := "we\"ird\\na\tme\x01<&>é"
	require.NoError(t, Write(path, []NamedTensor{{Name: name, Dtype: DtypeF16, Shape: []int{1}, Values: []float32{2}}},
		map[string]string{"k\n": "v\u2028"}))
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.Equal(t, []string{name}, f.Names())
	require.Equal(t, map[string]string{"k\n": "v\u2028"}, f.Metadata())
	raw, _ := os.ReadFile(path)
	require.Contains(t, string(raw), `"we\"ird\\na\tme\u0001<&>é"`)
}

func TestSafetensorsSharded(t *testing.T) {
	dir := t.TempDir()
	var tensors []NamedTensor
	for i, n := range []string{"z.w", "a.w", "m.w", "b.w"} {
		vals := make([]float32, 10)
		for j := range vals {
			vals[j] = float32(i*10 + j)
		}
		tensors = append(tensors, NamedTensor{Name: n, Dtype: DtypeF32, Shape: []int{2, 5}, Values: vals})
	}
	idx, err := WriteSharded(dir, tensors, map[string]string{"format": "pt"}, 80)
	require.NoError(t, err)
	require.Equal(t, []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}, idx.Files)
	require.Equal(t, "model-00001-of-00002.safetensors", idx.WeightMap["a.w"])
	require.Equal(t, int64(160), idx.TotalSize)

	d, err := OpenDir(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"a.w", "b.w", "m.w", "z.w"}, d.Names())
	require.Equal(t, "160", d.Metadata()["total_size"])
	require.Len(t, d.Files(), 2)
	v, err := d.Tensor("m.w")
	require.NoError(t, err)
	vals, err := v.Float32s()
	require.NoError(t, err)
	require.Equal(t, float32(25), vals[5])
	_, err = d.Tensor("q.w")
	require.ErrorContains(t, err, "no tensor q.w")
	require.NoError(t, d.Close())

	// Bad indexes.
	writeIndex := func(m map[string]string) {
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 160}, "weight_map": m})
		require.NoError(t, os.WriteFile(filepath.Join(dir, IndexFileName), raw, 0o644))
	}
	good := idx.WeightMap
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range good {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tt := range []struct {
		name string
		m    map[string]string
		want string
	}{
		{"wrong file", with("a.w", "model-00002-of-00002.safetensors"), "weight_map puts tensor a.w in model-00002-of-00002.safetensors, which does not hold it"},
		{"missing file", with("q.w", "model-00009-of-00009.safetensors"), "weight_map: tensor q.w: open safetensors"},
		{"unmapped", with("a.w", ""), "tensor a.w of model-00001-of-00002.safetensors is not in the weight_map"},
		{"traversal", with("a.w", "../x.safetensors"), `tensor a.w: file "../x.safetensors" is not a file name in the directory`},
		{"empty", map[string]string{}, "weight_map is missing or empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			writeIndex(tt.m)
			_, err := OpenDir(dir)
			require.ErrorContains(t, err, tt.want)
		})
	}

	// One shard: model.safetensors, no index; it wins over an index.
	one := t.TempDir()
	idx, err = WriteSharded(one, tensors, nil, 1<<20)
	require.NoError(t, err)
	require.Equal(t, []string{FileName}, idx.Files)
	d, err = OpenDir(one)
	require.NoError(t, err)
	require.Len(t, d.Names(), 4)
	require.NoError(t, d.Close())
	_, err = OpenDir(t.TempDir())
	require.ErrorContains(t, err, "neither model.safetensors nor model.safetensors.index.json exists")
}

// FuzzSafetensors feeds arbitrary bytes to the parser: it must return a file or an
// error, never panic, and whatever it accepts must be readable in full.
//
//	go test ./data -run '^$' -fuzz '^FuzzSafetensors$' -fuzztime 2m -fuzzminimizetime 10s
func FuzzSafetensors(f *testing.F) {
	// Small seeds: the fuzzer minimizes every new interesting input, which takes
	// long for large ones (the 17 kB golden file stalls it for a minute).
	var valid bytes.Buffer
	err := encodeSafetensors(&valid, []NamedTensor{
		{Name: "w", Dtype: DtypeBF16, Shape: []int{2, 3}, Values: []float32{1, 2, 3, 4, 5, 6}},
		{Name: "ids", Dtype: DtypeI64, Shape: []int{2}, Raw: make([]byte, 16)},
		{Name: "h", Dtype: DtypeF16, Shape: []int{1}, Values: []float32{0.5}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid.Bytes())
	f.Add(valid.Bytes()[:valid.Len()-3]) // truncated
	f.Add(stFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}}`, make([]byte, 12)))
	f.Add(stFile(`{"__metadata__":{"k":"v"},"a":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}  `, make([]byte, 2)))
	f.Add(stFile(`{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil))
	f.Add(stFile(`{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,1]}}`, make([]byte, 1)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		sf, err := parseSafetensors("fuzz", b)
		if err != nil {
			return
		}
		total := 0
		for _, name := range sf.Names() {
			v, err := sf.Tensor(name)
			if err != nil {
				t.Fatalf("listed tensor %s: %v", name, err)
			}
			if n, _ := byteSize(v.Dtype, v.Shape); n != len(v.Data) {
				t.Fatalf("tensor %s: %d bytes for shape %v of %s", name, len(v.Data), v.Shape, v.Dtype)
			}
			total += len(v.Data)
			if v.Dtype.IsFloat() {
				if _, err := v.Float32s(); err != nil {
					t.Fatalf("tensor %s: %v", name, err)
				}
			}
		}
		if n := binary.LittleEndian.Uint64(b); total != len(b)-8-int(n) {
			t.Fatalf("tensors cover %d of %d data bytes", total, len(b)-8-int(n))
		}
	})
}
