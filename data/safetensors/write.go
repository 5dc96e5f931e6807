package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// NamedTensor is one tensor to write. Set either Values, which are converted to
// Dtype (F32, BF16 or F16, rounding to nearest even) on the way out, or Raw, the
// little-endian bytes already in Dtype. Shape is row-major; [] is a scalar.
type NamedTensor struct {
	Name   string
	Dtype  Dtype
	Shape  []int
	Values []float32
	Raw    []byte
}

// nbytes is the size of the tensor's data in the file, after checking that the
// values or raw bytes fit the dtype and shape.
func (t NamedTensor) nbytes() (int, error) {
	if t.Name == "" || t.Name == "__metadata__" || !utf8.ValidString(t.Name) {
		return 0, fmt.Errorf("tensor name %q is empty, reserved or not UTF-8", t.Name)
	}
	if t.Dtype.Size() == 0 {
		return 0, fmt.Errorf("tensor %s: unknown dtype %q", t.Name, t.Dtype)
	}
	n := 1
	for _, d := range t.Shape {
		if d < 0 {
			return 0, fmt.Errorf("tensor %s: negative dimension in shape %s", t.Name, ShapeString(t.Shape))
		}
		n *= d
	}
	size, ok := byteSize(t.Dtype, t.Shape)
	if !ok {
		return 0, fmt.Errorf("tensor %s: shape %s overflows", t.Name, ShapeString(t.Shape))
	}
	switch {
	case t.Raw != nil && t.Values != nil:
		return 0, fmt.Errorf("tensor %s: both Values and Raw are set", t.Name)
	case t.Raw != nil || size == 0:
		if len(t.Raw) != size || len(t.Values) != 0 {
			return 0, fmt.Errorf("tensor %s: %d raw bytes, shape %s of %s needs %d", t.Name, len(t.Raw), ShapeString(t.Shape), t.Dtype, size)
		}
	default:
		if !t.Dtype.IsFloat() {
			return 0, fmt.Errorf("tensor %s: Values convert only to F32, BF16 or F16, not %s (use Raw)", t.Name, t.Dtype)
		}
		if len(t.Values) != n {
			return 0, fmt.Errorf("tensor %s: %d values, shape %s needs %d", t.Name, len(t.Values), ShapeString(t.Shape), n)
		}
	}
	return size, nil
}

// Write writes tensors and metadata to path as a safetensors file,
// atomically (temp file, fsync, rename, fsync of the directory). The bytes are
// those Python's safetensors writes for the same tensors: the header's keys are
// "__metadata__" (omitted when metadata is empty) then the tensors in data order,
// which is by descending dtype alignment then name; the header is padded with
// spaces to a multiple of 8 bytes, so every tensor's data is aligned.
func Write(path string, tensors []NamedTensor, metadata map[string]string) error {
	err := fsutil.WriteFile(path, 0o644, func(w io.Writer) error { return encodeSafetensors(w, tensors, metadata) })
	if err != nil {
		return fmt.Errorf("write safetensors %s: %w", path, err)
	}
	return nil
}

// encodeSafetensors writes the safetensors encoding of tensors to w.
func encodeSafetensors(w io.Writer, tensors []NamedTensor, metadata map[string]string) error {
	order, header, err := safetensorsHeader(tensors, metadata)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	bw.Write(n[:])
	bw.Write(header)
	for _, t := range order {
		if err := writeTensorData(bw, t); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// safetensorsHeader orders the tensors as the reference writer does and returns
// them with the padded JSON header.
func safetensorsHeader(tensors []NamedTensor, metadata map[string]string) ([]NamedTensor, []byte, error) {
	order := slices.Clone(tensors)
	slices.SortStableFunc(order, func(a, b NamedTensor) int {
		if c := dtypeInfo[b.Dtype].rank - dtypeInfo[a.Dtype].rank; c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	seen := make(map[string]bool, len(order))
	for _, t := range order {
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("tensor %s: name appears twice", t.Name)
		}
		seen[t.Name] = true
	}
	var h strings.Builder
	h.WriteByte('{')
	if len(metadata) > 0 {
		h.WriteString(`"__metadata__":{`)
		for i, k := range slices.Sorted(maps.Keys(metadata)) {
			if i > 0 {
				h.WriteByte(',')
			}
			if !utf8.ValidString(k) || !utf8.ValidString(metadata[k]) {
				return nil, nil, fmt.Errorf("metadata %q: not UTF-8", k)
			}
			writeJSONString(&h, k)
			h.WriteByte(':')
			writeJSONString(&h, metadata[k])
		}
		h.WriteByte('}')
	}
	offset := 0
	for i, t := range order {
		size, err := t.nbytes()
		if err != nil {
			return nil, nil, err
		}
		if i > 0 || len(metadata) > 0 {
			h.WriteByte(',')
		}
		writeJSONString(&h, t.Name)
		fmt.Fprintf(&h, `:{"dtype":"%s","shape":[`, t.Dtype)
		for j, d := range t.Shape {
			if j > 0 {
				h.WriteByte(',')
			}
			fmt.Fprint(&h, d)
		}
		fmt.Fprintf(&h, `],"data_offsets":[%d,%d]}`, offset, offset+size)
		offset += size
	}
	h.WriteByte('}')
	for h.Len()%8 != 0 {
		h.WriteByte(' ')
	}
	if h.Len() > maxHeaderSize {
		return nil, nil, fmt.Errorf("header of %d bytes exceeds the limit of %d", h.Len(), maxHeaderSize)
	}
	return order, []byte(h.String()), nil
}

// writeJSONString writes s as a JSON string the way serde_json does: only '"', '\\'
// and control characters are escaped; other characters are written as UTF-8.
func writeJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}

// writeTensorData writes one tensor's bytes, converting Values chunk by chunk so
// that no second copy of a large tensor is made.
func writeTensorData(w *bufio.Writer, t NamedTensor) error {
	if t.Raw != nil || len(t.Values) == 0 {
		_, err := w.Write(t.Raw)
		return err
	}
	var buf [4096]byte
	size := t.Dtype.Size()
	per := len(buf) / size
	for start := 0; start < len(t.Values); start += per {
		chunk := t.Values[start:min(start+per, len(t.Values))]
		for i, v := range chunk {
			switch t.Dtype {
			case DtypeF32:
				binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
			case DtypeBF16:
				binary.LittleEndian.PutUint16(buf[2*i:], Float32ToBF16(v))
			case DtypeF16:
				binary.LittleEndian.PutUint16(buf[2*i:], Float32ToF16(v))
			}
		}
		if _, err := w.Write(buf[:len(chunk)*size]); err != nil {
			return err
		}
	}
	return nil
}

// ShardedIndex is what WriteSharded wrote: the shard file names in
// order and the index's weight map.
type ShardedIndex struct {
	Files     []string
	WeightMap map[string]string
	TotalSize int64
}

// WriteSharded writes tensors into dir the way transformers'
// save_pretrained shards them: files model-0000i-of-0000n.safetensors of at most
// maxShardBytes of tensor data each (a larger tensor gets a shard of its own), in
// the tensors' given order, plus model.safetensors.index.json with
// {"metadata": {"total_size": N}, "weight_map": {name: file}}. When everything fits
// in one shard it writes model.safetensors and no index, as transformers does.
// Each file is written atomically; the index last, so readers that go through it
// never see a partial set. metadata goes into every shard's header.
func WriteSharded(dir string, tensors []NamedTensor, metadata map[string]string, maxShardBytes int64) (*ShardedIndex, error) {
	if maxShardBytes <= 0 {
		return nil, fmt.Errorf("write sharded safetensors: max shard size %d is not positive", maxShardBytes)
	}
	var shards [][]NamedTensor
	var cur []NamedTensor
	var curSize, total int64
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		size, err := t.nbytes()
		if err != nil {
			return nil, fmt.Errorf("write sharded safetensors: %w", err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("write sharded safetensors: tensor %s: name appears twice", t.Name)
		}
		seen[t.Name] = true
		if len(cur) > 0 && curSize+int64(size) > maxShardBytes {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += int64(size)
		total += int64(size)
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	idx := &ShardedIndex{WeightMap: map[string]string{}, TotalSize: total}
	if len(shards) == 1 {
		idx.Files = []string{FileName}
		for _, t := range tensors {
			idx.WeightMap[t.Name] = FileName
		}
		return idx, Write(filepath.Join(dir, FileName), tensors, metadata)
	}
	for i, shard := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := Write(filepath.Join(dir, name), shard, metadata); err != nil {
			return nil, err
		}
		idx.Files = append(idx.Files, name)
		for _, t := range shard {
			idx.WeightMap[t.Name] = name
		}
	}
	doc := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, idx.WeightMap}
	raw, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("write sharded safetensors: %w", err)
	}
	indexPath := filepath.Join(dir, IndexFileName)
	if err := fsutil.WriteFile(indexPath, 0o644, func(w io.Writer) error {
		_, err := w.Write(append(raw, '\n'))
		return err
	}); err != nil {
		return nil, fmt.Errorf("write %s: %w", indexPath, err)
	}
	return idx, nil
}
