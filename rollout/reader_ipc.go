package rollout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// msgSource is the ipc.MessageReader under the Reader: it reads IPC messages from a
// section of the file and checks each one's flatbuffer metadata (checkMessage) before
// arrow decodes it. Lengths are checked against what is left of the section, so a
// corrupt length field can make it allocate no more than the file holds.
//
// A stream is read from one section, message after message. A file-format file is
// read through its footer (newFileMsgSource): first the Schema message built from the
// footer's schema, then each block the footer lists, each a section of its own.
type msgSource struct {
	r      io.Reader
	remain int64 // bytes of the section not read yet
	mem    memory.Allocator
	msg    *ipc.Message // the last message, released when the next is read
	hdr    [4]byte
	spare  []byte // the body buffer of record batches, reused for each message

	// The file format: the footer's schema message, sent first, and the blocks.
	file       io.ReaderAt
	schemaMeta []byte
	blocks     []fileBlock
	next       int // the next block to read; -1 before the schema message
}

// newFileMsgSource returns a msgSource that reads the messages a footer lists.
func newFileMsgSource(file io.ReaderAt, ft fileFooter) *msgSource {
	return &msgSource{file: file, schemaMeta: ft.schemaMeta, blocks: ft.blocks, next: -1, mem: memory.DefaultAllocator}
}

// read fills p, or fails wrapping io.ErrUnexpectedEOF when the section ends first.
func (s *msgSource) read(p []byte, what string) error {
	if int64(len(p)) > s.remain {
		return fmt.Errorf("read %s: needs %d bytes, %d left: %w", what, len(p), s.remain, io.ErrUnexpectedEOF)
	}
	n, err := io.ReadFull(s.r, p)
	s.remain -= int64(n)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// Message returns the next message; io.EOF at the end-of-stream marker or at the end
// of the section between two messages (a stream), after the last block (a file).
func (s *msgSource) Message() (*ipc.Message, error) {
	if s.msg != nil {
		s.msg.Release()
		s.msg = nil
	}
	if s.file != nil {
		return s.blockMessage()
	}
	if s.remain == 0 {
		return nil, io.EOF
	}
	msg, _, err := s.readMessage(-1)
	return msg, err
}

// blockMessage returns the footer's schema message, then the message of each block.
func (s *msgSource) blockMessage() (*ipc.Message, error) {
	if s.next < 0 {
		s.next = 0
		s.msg = ipc.NewMessage(memory.NewBufferBytes(s.schemaMeta), memory.NewBufferBytes(nil))
		return s.msg, nil
	}
	if s.next == len(s.blocks) {
		return nil, io.EOF
	}
	i, b := s.next, s.blocks[s.next]
	s.next++
	s.r = io.NewSectionReader(s.file, b.offset, b.metaLen+b.bodyLen)
	s.remain = b.metaLen + b.bodyLen
	msg, info, err := s.readMessage(b.metaLen)
	switch {
	case errors.Is(err, io.EOF):
		return nil, fmt.Errorf("block %d at offset %d holds no message: %w", i, b.offset, io.ErrUnexpectedEOF)
	case err != nil:
		return nil, fmt.Errorf("block %d at offset %d: %w", i, b.offset, err)
	case info.kind != b.kind:
		return nil, fmt.Errorf("block %d at offset %d: the footer lists message type %d, the message is of type %d", i, b.offset, b.kind, info.kind)
	case info.bodyLen != b.bodyLen:
		return nil, fmt.Errorf("block %d at offset %d: the footer gives a %d-byte body, the message %d bytes", i, b.offset, b.bodyLen, info.bodyLen)
	}
	return msg, nil
}

// readMessage reads one message from s.r. metaLen, when ≥ 0, is the length that a
// file footer gives its marker, length and metadata: padding up to it is skipped.
func (s *msgSource) readMessage(metaLen int64) (*ipc.Message, msgInfo, error) {
	var info msgInfo
	start := s.remain
	if err := s.read(s.hdr[:], "message marker"); err != nil {
		return nil, info, err
	}
	if !bytes.Equal(s.hdr[:], streamContinuation) {
		if binary.LittleEndian.Uint32(s.hdr[:]) == 0 { // pre-0.15 end-of-stream marker
			return nil, info, io.EOF
		}
		return nil, info, fmt.Errorf("read message: bytes %x are not a message marker", s.hdr)
	}
	if err := s.read(s.hdr[:], "message length"); err != nil {
		return nil, info, err
	}
	n := int32(binary.LittleEndian.Uint32(s.hdr[:]))
	if n == 0 {
		return nil, info, io.EOF // end-of-stream marker
	}
	if n < 0 || n > metadataSizeLimit {
		return nil, info, fmt.Errorf("read message: metadata length %d out of range", n)
	}
	if int64(n) > s.remain {
		return nil, info, fmt.Errorf("read message metadata: needs %d bytes, %d left: %w", n, s.remain, io.ErrUnexpectedEOF)
	}
	meta := make([]byte, n)
	if err := s.read(meta, "message metadata"); err != nil {
		return nil, info, err
	}
	info, err := checkMessage(meta)
	if err != nil {
		return nil, info, fmt.Errorf("read message: %w", err)
	}
	if metaLen >= 0 {
		if pad := metaLen - (start - s.remain); pad < 0 {
			return nil, info, fmt.Errorf("read message: metadata of %d bytes overruns the %d the footer gives", start-s.remain, metaLen)
		} else if pad > 0 {
			if err := s.read(make([]byte, pad), "metadata padding"); err != nil {
				return nil, info, err
			}
		}
	}
	if info.bodyLen > s.remain {
		return nil, info, fmt.Errorf("read message body: needs %d bytes, %d left: %w", info.bodyLen, s.remain, io.ErrUnexpectedEOF)
	}
	bodyBytes := s.bodyBuffer(info)
	if err := s.read(bodyBytes, "message body"); err != nil {
		return nil, info, err
	}
	if err := info.checkBody(bodyBytes); err != nil {
		return nil, info, fmt.Errorf("read message: %w", err)
	}
	body := memory.NewBufferBytes(bodyBytes)
	defer body.Release()
	s.msg = ipc.NewMessage(memory.NewBufferBytes(meta), body)
	return s.msg, info, nil
}

// bodyBuffer returns a buffer for the body of the message info describes. A record
// batch's is reused from one message to the next: the Reader releases a batch before
// it reads the next one, and Go would otherwise zero a fresh buffer as large as the
// batch each time. A dictionary gets its own, since arrow keeps it for the batches
// that follow.
func (s *msgSource) bodyBuffer(info msgInfo) []byte {
	if info.kind != fbRecordBatch {
		return make([]byte, info.bodyLen)
	}
	if s.spare == nil {
		if b, ok := bodyPool.Get().(*[]byte); ok {
			s.spare = *b
		}
	}
	if int64(cap(s.spare)) < info.bodyLen {
		s.spare = make([]byte, info.bodyLen)
	}
	return s.spare[:info.bodyLen]
}

// bodyPool keeps body buffers between Readers, so a daemon reading file after file
// does not allocate and zero a batch-sized buffer for each.
var bodyPool sync.Pool

// recycle gives the body buffer back to bodyPool once the Reader is closed and no
// batch refers to it.
func (s *msgSource) recycle() {
	if s.spare != nil {
		b := s.spare[:0]
		bodyPool.Put(&b)
		s.spare = nil
	}
}

// Retain is a no-op: the Reader owns the msgSource.
func (s *msgSource) Retain() {}

// Release releases the last message; it may be called more than once.
func (s *msgSource) Release() {
	if s.msg != nil {
		s.msg.Release()
		s.msg = nil
	}
}

// Limits on what a message's metadata may describe. Ours has 10 columns and 6 segment
// fields; the limits only stop a corrupt file from making arrow allocate or recurse
// without bound.
const (
	maxNesting      = 32      // depth of nested fields
	maxFields       = 1 << 14 // fields in a schema, children included
	maxKeyValues    = 1 << 16 // custom metadata entries in a message
	maxInflatedBody = 1 << 31 // bytes of one decompressed buffer
)

// Message header types and type ids of the Arrow flatbuffer schema (Message.fbs,
// Schema.fbs).
const (
	fbSchema          = 1
	fbDictionaryBatch = 2
	fbRecordBatch     = 3
	fbTypeUnion       = 14
)

// msgInfo is what checkMessage learnt from a message's metadata.
type msgInfo struct {
	kind       byte
	bodyLen    int64
	buffers    [][2]int64 // offset and length of each body buffer
	compressed bool
}

// checkBody checks the declared decompressed length of each buffer of a compressed
// batch, which arrow allocates before decompressing.
func (m *msgInfo) checkBody(body []byte) error {
	if !m.compressed {
		return nil
	}
	for i, b := range m.buffers {
		if b[1] == 0 {
			continue
		}
		if b[1] < 8 {
			return fmt.Errorf("compressed buffer %d has %d bytes, less than its length prefix", i, b[1])
		}
		n := int64(binary.LittleEndian.Uint64(body[b[0]:]))
		if n != -1 && (n < 0 || n > maxInflatedBody) {
			return fmt.Errorf("compressed buffer %d claims %d bytes decompressed", i, n)
		}
	}
	return nil
}

// checkMessage checks the flatbuffer metadata of one IPC message: every table, vector
// and string it or arrow reads lies inside meta, nesting and field counts are bounded,
// and body buffers lie inside the body.
func checkMessage(meta []byte) (msgInfo, error) {
	var m msgInfo
	root, err := fbRoot(meta)
	if err != nil {
		return m, err
	}
	if m.kind, err = root.u8(1); err != nil {
		return m, err
	}
	if m.bodyLen, err = root.i64(3); err != nil {
		return m, err
	}
	if m.bodyLen < 0 {
		return m, fmt.Errorf("negative body length %d", m.bodyLen)
	}
	kv := 0
	if err := root.keyValues(4, &kv); err != nil {
		return m, err
	}
	hdr, ok, err := root.table(2)
	if err != nil {
		return m, err
	}
	if !ok {
		return m, fmt.Errorf("message of type %d has no header", m.kind)
	}
	switch m.kind {
	case fbSchema:
		return m, checkSchemaFB(hdr)
	case fbDictionaryBatch:
		data, ok, err := hdr.table(1)
		if err != nil {
			return m, err
		}
		if !ok {
			return m, errors.New("dictionary batch has no data")
		}
		return m, m.checkBatch(data)
	case fbRecordBatch:
		return m, m.checkBatch(hdr)
	default:
		return m, fmt.Errorf("unsupported message type %d", m.kind)
	}
}

// checkBatch checks a RecordBatch table: its nodes, buffers and compression.
func (m *msgInfo) checkBatch(t fbTable) error {
	if _, _, err := t.vector(1, 16); err != nil { // nodes
		return err
	}
	if _, _, err := t.vector(4, 8); err != nil { // variadic buffer counts
		return err
	}
	start, n, err := t.vector(2, 16)
	if err != nil {
		return err
	}
	m.buffers = make([][2]int64, n)
	for i := range m.buffers {
		p := start + 16*i
		off := int64(binary.LittleEndian.Uint64(t.b[p:]))
		length := int64(binary.LittleEndian.Uint64(t.b[p+8:]))
		if off < 0 || length < 0 || off > m.bodyLen || length > m.bodyLen-off {
			return fmt.Errorf("buffer %d [%d, +%d) is outside the %d-byte body", i, off, length, m.bodyLen)
		}
		m.buffers[i] = [2]int64{off, length}
	}
	_, m.compressed, err = t.table(3)
	return err
}

// checkSchemaFB checks a Schema table.
func checkSchemaFB(t fbTable) error {
	if _, _, err := t.vector(3, 8); err != nil { // features
		return err
	}
	kv, fields := 0, 0
	if err := t.keyValues(2, &kv); err != nil {
		return err
	}
	return t.fields(1, 1, &fields, &kv)
}

// fields checks a vector of Field tables at slot, and their children.
func (t fbTable) fields(slot, depth int, count, kv *int) error {
	if depth > maxNesting {
		return fmt.Errorf("fields nested deeper than %d", maxNesting)
	}
	start, n, err := t.vector(slot, 4)
	if err != nil {
		return err
	}
	if *count += n; *count > maxFields {
		return fmt.Errorf("schema has more than %d fields", maxFields)
	}
	for i := 0; i < n; i++ {
		f, err := t.elem(start, i)
		if err != nil {
			return err
		}
		if _, _, err := f.vector(0, 1); err != nil { // name
			return err
		}
		typ, err := f.u8(2)
		if err != nil {
			return err
		}
		tt, ok, err := f.table(3)
		if err != nil {
			return err
		}
		if ok && typ == fbTypeUnion {
			if _, _, err := tt.vector(1, 4); err != nil { // type ids
				return err
			}
		}
		if dict, ok, err := f.table(4); err != nil {
			return err
		} else if ok {
			if _, _, err := dict.table(1); err != nil { // index type
				return err
			}
		}
		if err := f.keyValues(6, kv); err != nil {
			return err
		}
		if err := f.fields(5, depth+1, count, kv); err != nil {
			return err
		}
	}
	return nil
}

// fbTable is a flatbuffer table whose vtable has been checked to lie inside b. Its
// accessors check every offset before following it; offsets only point forward, so a
// corrupt buffer cannot make them loop.
type fbTable struct {
	b              []byte
	pos, vt        int
	vtLen, tblSize int
}

var errFlatbuffer = errors.New("flatbuffer offset out of range")

func fbRoot(b []byte) (fbTable, error) {
	if len(b) < 4 {
		return fbTable{}, errFlatbuffer
	}
	return fbTableAt(b, int64(binary.LittleEndian.Uint32(b)))
}

func fbTableAt(b []byte, pos int64) (fbTable, error) {
	if pos < 0 || pos+4 > int64(len(b)) {
		return fbTable{}, errFlatbuffer
	}
	vt := pos - int64(int32(binary.LittleEndian.Uint32(b[pos:])))
	if vt < 0 || vt+4 > int64(len(b)) {
		return fbTable{}, errFlatbuffer
	}
	vtLen := int64(binary.LittleEndian.Uint16(b[vt:]))
	tblSize := int64(binary.LittleEndian.Uint16(b[vt+2:]))
	if vtLen < 4 || vt+vtLen > int64(len(b)) || pos+tblSize > int64(len(b)) {
		return fbTable{}, errFlatbuffer
	}
	return fbTable{b: b, pos: int(pos), vt: int(vt), vtLen: int(vtLen), tblSize: int(tblSize)}, nil
}

// field returns the position of field slot, of size bytes, or 0 when it is absent.
func (t fbTable) field(slot, size int) (int, error) {
	o := 4 + 2*slot
	if o+2 > t.vtLen {
		return 0, nil
	}
	off := int(binary.LittleEndian.Uint16(t.b[t.vt+o:]))
	if off == 0 {
		return 0, nil
	}
	if off+size > t.tblSize {
		return 0, errFlatbuffer
	}
	return t.pos + off, nil
}

func (t fbTable) u8(slot int) (byte, error) {
	p, err := t.field(slot, 1)
	if p == 0 || err != nil {
		return 0, err
	}
	return t.b[p], nil
}

func (t fbTable) i16(slot int) (int16, error) {
	p, err := t.field(slot, 2)
	if p == 0 || err != nil {
		return 0, err
	}
	return int16(binary.LittleEndian.Uint16(t.b[p:])), nil
}

func (t fbTable) i64(slot int) (int64, error) {
	p, err := t.field(slot, 8)
	if p == 0 || err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(t.b[p:])), nil
}

// indirect follows the offset stored at field slot; ok is false when it is absent.
func (t fbTable) indirect(slot int) (pos int64, ok bool, err error) {
	p, err := t.field(slot, 4)
	if p == 0 || err != nil {
		return 0, false, err
	}
	return int64(p) + int64(binary.LittleEndian.Uint32(t.b[p:])), true, nil
}

func (t fbTable) table(slot int) (fbTable, bool, error) {
	p, ok, err := t.indirect(slot)
	if !ok || err != nil {
		return fbTable{}, false, err
	}
	tt, err := fbTableAt(t.b, p)
	return tt, err == nil, err
}

// vector returns the start and length of the vector at slot (n = 0 when absent),
// checked to hold n elements of elemSize bytes inside the buffer.
func (t fbTable) vector(slot, elemSize int) (start, n int, err error) {
	p, ok, err := t.indirect(slot)
	if !ok || err != nil {
		return 0, 0, err
	}
	if p+4 > int64(len(t.b)) {
		return 0, 0, errFlatbuffer
	}
	length := int64(binary.LittleEndian.Uint32(t.b[p:]))
	if p+4+length*int64(elemSize) > int64(len(t.b)) {
		return 0, 0, errFlatbuffer
	}
	return int(p + 4), int(length), nil
}

// elem returns table i of a vector of tables starting at start.
func (t fbTable) elem(start, i int) (fbTable, error) {
	p := int64(start) + 4*int64(i)
	return fbTableAt(t.b, p+int64(binary.LittleEndian.Uint32(t.b[p:])))
}

// keyValues checks a vector of KeyValue tables (custom metadata) at slot.
func (t fbTable) keyValues(slot int, count *int) error {
	start, n, err := t.vector(slot, 4)
	if err != nil {
		return err
	}
	if *count += n; *count > maxKeyValues {
		return fmt.Errorf("more than %d custom metadata entries", maxKeyValues)
	}
	for i := 0; i < n; i++ {
		kv, err := t.elem(start, i)
		if err != nil {
			return err
		}
		if _, _, err := kv.vector(0, 1); err != nil {
			return err
		}
		if _, _, err := kv.vector(1, 1); err != nil {
			return err
		}
	}
	return nil
}
