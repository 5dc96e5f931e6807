package rollout

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The file format is read through its footer, as pyarrow, arrow-go's FileReader and
// the other Arrow readers do: the schema comes from the footer, and the footer's blocks
// say where each dictionary and record batch is. Writers differ in what they put
// between the leading magic and the footer: C++, Go, Rust and Java repeat the schema
// as a stream message there, apache-arrow for JavaScript does not (its first message
// is a record batch). When the leading schema message is there, it must agree with
// the footer's.

// fileBlock is one Block of a file footer: where a message is, as the footer says.
type fileBlock struct {
	offset  int64 // from the start of the file
	metaLen int64 // the message's marker, length and flatbuffer metadata, padding included
	bodyLen int64
	kind    byte // fbDictionaryBatch or fbRecordBatch: what the footer lists it as
}

// fileFooter is what the footer of a file-format file holds.
type fileFooter struct {
	// schemaMeta is a Schema message's metadata built around the footer's schema table
	// (schemaMessage), so that arrow's stream reader can read it as the first message.
	schemaMeta []byte
	blocks     []fileBlock // the dictionaries, then the record batches, in footer order
	batches    int         // record batches among blocks
}

// Footer fields (File.fbs): Footer {version, schema, dictionaries, recordBatches,
// custom_metadata}; Block is a struct {offset int64, metaDataLength int32, pad,
// bodyLength int64} of 24 bytes.
const (
	fbFooterVersion       = 0
	fbFooterSchema        = 1
	fbFooterDictionaries  = 2
	fbFooterRecordBatches = 3
	fbBlockSize           = 24
	fbMetadataV5          = 4
)

// readFooter reads and checks the end of a file-format file: magic, footer length,
// footer. Every block must lie between the leading magic and the footer.
func (r *Reader) readFooter(size int64) (footerStart int64, ft fileFooter, p *Problem) {
	const tail = 4 + 6 // int32 footer length, "ARROW1"
	if size < int64(len(fileMagic))+tail {
		return 0, ft, &Problem{Code: ETruncated, Reason: fmt.Sprintf("arrow file of %d bytes has no footer (cut short?)", size)}
	}
	buf := make([]byte, tail)
	if _, err := r.src.ReadAt(buf, size-tail); err != nil {
		return 0, ft, &Problem{Code: EIO, Reason: fmt.Sprintf("read footer: %v", err)}
	}
	if !bytes.Equal(buf[4:], fileMagic[:6]) {
		return 0, ft, &Problem{Code: ETruncated, Reason: "arrow file does not end with its footer and magic (cut short?)"}
	}
	n := int64(int32(binary.LittleEndian.Uint32(buf)))
	footerStart = size - tail - n
	if n <= 0 || footerStart < int64(len(fileMagic)) || n > metadataSizeLimit {
		return 0, ft, &Problem{Code: ETruncated, Reason: fmt.Sprintf("arrow file footer length %d does not fit the file (%d bytes)", n, size)}
	}
	footer := make([]byte, n)
	if _, err := r.src.ReadAt(footer, footerStart); err != nil {
		return 0, ft, &Problem{Code: EIO, Reason: fmt.Sprintf("read footer: %v", err)}
	}
	ft, err := parseFooter(footer, footerStart)
	if err != nil {
		return 0, ft, &Problem{Code: ETruncated, Reason: fmt.Sprintf("corrupt arrow file footer: %v", err)}
	}
	return footerStart, ft, nil
}

// parseFooter checks a footer's flatbuffer and its blocks, which must lie in
// [8, footerStart).
func parseFooter(b []byte, footerStart int64) (fileFooter, error) {
	var ft fileFooter
	root, err := fbRoot(b)
	if err != nil {
		return ft, err
	}
	version, err := root.i16(fbFooterVersion)
	if err != nil {
		return ft, err
	}
	if version == 0 {
		version = fbMetadataV5
	}
	schema, ok, err := root.table(fbFooterSchema)
	if err != nil {
		return ft, err
	}
	if !ok {
		return ft, errors.New("the footer has no schema")
	}
	if err := checkSchemaFB(schema); err != nil {
		return ft, fmt.Errorf("footer schema: %w", err)
	}
	ft.schemaMeta = schemaMessage(b, schema.pos, version)
	for _, list := range []struct {
		slot int
		kind byte
		what string
	}{{fbFooterDictionaries, fbDictionaryBatch, "dictionary"}, {fbFooterRecordBatches, fbRecordBatch, "record batch"}} {
		start, n, err := root.vector(list.slot, fbBlockSize)
		if err != nil {
			return ft, err
		}
		for i := 0; i < n; i++ {
			p := b[start+fbBlockSize*i:]
			blk := fileBlock{
				offset:  int64(binary.LittleEndian.Uint64(p)),
				metaLen: int64(int32(binary.LittleEndian.Uint32(p[8:]))),
				bodyLen: int64(binary.LittleEndian.Uint64(p[16:])),
				kind:    list.kind,
			}
			first := int64(len(fileMagic))
			if blk.offset < first || blk.offset >= footerStart || blk.metaLen < 8 || blk.bodyLen < 0 ||
				blk.metaLen > footerStart-blk.offset || blk.bodyLen > footerStart-blk.offset-blk.metaLen {
				return ft, fmt.Errorf("%s block %d (offset %d, metadata %d bytes, body %d bytes) is outside the file's %d bytes of messages",
					list.what, i, blk.offset, blk.metaLen, blk.bodyLen, footerStart-first)
			}
			ft.blocks = append(ft.blocks, blk)
		}
		if list.kind == fbRecordBatch {
			ft.batches = n
		}
	}
	return ft, nil
}

// schemaMessage returns the metadata of a Schema message whose header is the schema
// table at schemaPos of footer: a 40-byte Message table {version, header_type =
// Schema, header, bodyLength = 0} followed by a copy of the footer. Flatbuffer offsets
// are relative and point forward, so the copied footer needs no change and the
// header's offset reaches into it.
func schemaMessage(footer []byte, schemaPos int, version int16) []byte {
	const (
		vt   = 4  // the Message vtable: 4 fields
		tbl  = 16 // the Message table
		head = 40 // where the footer's copy starts
	)
	b := make([]byte, head+len(footer))
	le := binary.LittleEndian
	le.PutUint32(b[0:], tbl)      // root: the Message table
	le.PutUint16(b[vt:], 12)      // vtable size: 4 + 2*4
	le.PutUint16(b[vt+2:], 24)    // table size
	le.PutUint16(b[vt+4:], 4)     // version at tbl+4
	le.PutUint16(b[vt+6:], 6)     // header_type at tbl+6
	le.PutUint16(b[vt+8:], 8)     // header at tbl+8
	le.PutUint16(b[vt+10:], 16)   // bodyLength at tbl+16
	le.PutUint32(b[tbl:], tbl-vt) // soffset to the vtable
	le.PutUint16(b[tbl+4:], uint16(version))
	b[tbl+6] = fbSchema
	le.PutUint32(b[tbl+8:], uint32(head+schemaPos-(tbl+8)))
	// bodyLength (b[tbl+16:tbl+24]) stays 0
	copy(b[head:], footer)
	return b
}

// checkLeadingSchema compares the schema message after the leading magic, when there
// is one, with the footer's schema (r.schema). A file whose first message is a
// dictionary or record batch (apache-arrow JS) has none and passes.
func (r *Reader) checkLeadingSchema(footerStart int64) *Problem {
	first := int64(len(fileMagic))
	meta, err := r.peekMessage(first, footerStart-first)
	if err != nil {
		if p := r.ioProblem(); p != nil {
			return p
		}
		return &Problem{Code: ETruncated, Reason: fmt.Sprintf("corrupt message after the file magic: %v", err)}
	}
	if meta == nil {
		return nil
	}
	lead, err := decodeSchema(meta)
	if err != nil {
		return &Problem{Code: ETruncated, Reason: fmt.Sprintf("corrupt schema message after the file magic: %v", err)}
	}
	if !lead.Equal(r.schema) || !lead.Metadata().Equal(r.schema.Metadata()) {
		return &Problem{Code: ETruncated, Reason: fmt.Sprintf("the schema after the file magic differs from the footer's: %s vs %s",
			schemaString(lead), schemaString(r.schema))}
	}
	return nil
}

// peekMessage reads the metadata of the message at off (at most limit bytes) and
// returns it when it is a Schema message, nil when it is another kind of message or
// an end-of-stream marker.
func (r *Reader) peekMessage(off, limit int64) ([]byte, error) {
	var hdr [8]byte
	if limit < int64(len(hdr)) {
		return nil, nil
	}
	if _, err := r.src.ReadAt(hdr[:], off); err != nil {
		return nil, fmt.Errorf("read message marker: %w", err)
	}
	if !bytes.Equal(hdr[:4], streamContinuation) {
		return nil, nil // an old-style (pre-0.15) prefix or padding: no schema message to compare
	}
	n := int64(int32(binary.LittleEndian.Uint32(hdr[4:])))
	if n == 0 {
		return nil, nil
	}
	if n < 0 || n > metadataSizeLimit || n > limit-8 {
		return nil, fmt.Errorf("metadata length %d does not fit the file", n)
	}
	meta := make([]byte, n)
	if _, err := r.src.ReadAt(meta, off+8); err != nil {
		return nil, fmt.Errorf("read message metadata: %w", err)
	}
	info, err := checkMessage(meta)
	if err != nil {
		return nil, err
	}
	if info.kind != fbSchema {
		return nil, nil
	}
	return meta, nil
}

// decodeSchema decodes a Schema message's metadata, checked by checkMessage.
func decodeSchema(meta []byte) (s *arrow.Schema, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("decode schema: %v", v)
		}
	}()
	src := &oneMessage{msg: ipc.NewMessage(memory.NewBufferBytes(meta), memory.NewBufferBytes(nil))}
	rd, err := ipc.NewReaderFromMessageReader(src)
	if err != nil {
		return nil, err
	}
	defer rd.Release()
	return rd.Schema(), nil
}

// oneMessage is an ipc.MessageReader that holds one message.
type oneMessage struct {
	msg  *ipc.Message
	done bool
}

func (o *oneMessage) Message() (*ipc.Message, error) {
	if o.done {
		return nil, io.EOF
	}
	o.done = true
	return o.msg, nil
}

func (o *oneMessage) Retain() {}

func (o *oneMessage) Release() {
	if o.msg != nil {
		o.msg.Release()
		o.msg = nil
	}
}

// schemaString writes a schema's fields on one line: name type, …
func schemaString(s *arrow.Schema) string {
	var b bytes.Buffer
	b.WriteString("{")
	for i, f := range s.Fields() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(f.Name + " " + typeString(f.Type))
	}
	if md := s.Metadata(); md.Len() > 0 {
		fmt.Fprintf(&b, "; metadata %v", md)
	}
	b.WriteString("}")
	return b.String()
}
