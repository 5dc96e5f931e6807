package rollout

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The interop suite: rollout files written by other Arrow implementations, committed
// under testdata/interop/<writer>/ with the scripts that made them (README,
// "Interop"). Every writer writes the rollouts of testdata/interop/cases.json as
// valid files and each malformed case of it; file names say the case, the format
// and the compression: valid.file.lz4.arrow, seg_range.stream.arrow.

const interopDir = "testdata/interop"

// interopSpec is cases.json.
type interopSpec struct {
	BatchRows int              `json:"batch_rows"`
	Row       int              `json:"row"`
	Rollouts  []map[string]any `json:"rollouts"`
	Malformed []struct {
		Name string         `json:"name"`
		Code Code           `json:"code"`
		Set  map[string]any `json:"set"`
	} `json:"malformed"`
}

// interopWriters are the writers the suite must hold, with the files that a writer
// cannot make and why (docs/rollouts.md, "Interop").
var interopWriters = map[string]map[string]string{
	"pyarrow": nil,
	"js": {
		"valid.file.lz4.arrow": jsCompression, "valid.file.zstd.arrow": jsCompression,
		"valid.stream.lz4.arrow": jsCompression, "valid.stream.zstd.arrow": jsCompression,
	},
	"arrow-go": nil,
	"polars":   nil,
	"duckdb":   nil,
	"java":     nil,
	"arrow-rs": nil,
}

// jsCompression is why apache-arrow JS has no compressed fixtures.
const jsCompression = "apache-arrow JS 21.2.0 writes the compressed length where the uncompressed one belongs; pyarrow fails on its files too"

func loadInteropSpec(t *testing.T) interopSpec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(interopDir, "cases.json"))
	require.NoError(t, err)
	var s interopSpec
	require.NoError(t, json.Unmarshal(data, &s))
	return s
}

// rollouts returns the spec's rollouts as the reader should return them.
func (s interopSpec) rollouts(t *testing.T) []*Rollout {
	t.Helper()
	var out []*Rollout
	for _, m := range s.Rollouts {
		out = append(out, rolloutFromMap(m))
	}
	return out
}

// malformed returns the rollouts of malformed case i: row s.Row patched.
func (s interopSpec) malformed(t *testing.T, i int) []*Rollout {
	t.Helper()
	out := s.rollouts(t)
	m := map[string]any{}
	for k, v := range s.Rollouts[s.Row] {
		m[k] = v
	}
	for k, v := range s.Malformed[i].Set {
		m[k] = v
	}
	out[s.Row] = rolloutFromMap(m)
	return out
}

// rolloutFromMap converts a rollout of cases.json ("NaN" for a NaN float).
func rolloutFromMap(m map[string]any) *Rollout {
	r := &Rollout{ID: m["rollout_id"].(string)}
	str := func(k string) string { v, _ := m[k].(string); return v }
	num := func(v any) float64 {
		if v == "NaN" {
			return math.NaN()
		}
		return v.(float64)
	}
	r.TaskID, r.Tokenizer = str("task_id"), str("tokenizer")
	if v, ok := m["policy_version"].(float64); ok {
		r.PolicyVersion = int64(v)
	}
	if v, ok := m["tokens"].([]any); ok {
		r.Tokens = make([]int32, len(v))
		for i, x := range v {
			r.Tokens[i] = int32(x.(float64))
		}
	}
	if v, ok := m["logprobs"].([]any); ok {
		r.LogProbs = make([]float32, len(v))
		valid := make([]byte, (len(v)+7)/8)
		for i, x := range v {
			if x != nil {
				r.LogProbs[i] = float32(num(x))
				valid[i/8] |= 1 << (i % 8)
			}
		}
		r.SetLogProbValidity(valid, 0)
	}
	if v, ok := m["segments"].([]any); ok {
		r.Segments = []Segment{}
		for _, x := range v {
			sm := x.(map[string]any)
			seg := Segment{Start: int32(sm["start"].(float64)), End: int32(sm["end"].(float64)), Status: StatusNone}
			seg.KindName = sm["kind"].(string)
			seg.Kind, _ = ParseSegmentKind(seg.KindName)
			seg.Tool, _ = sm["tool"].(string)
			seg.Feedback, _ = sm["feedback"].(string)
			if st, ok := sm["status"].(float64); ok {
				seg.Status = ToolStatus(st)
			}
			r.Segments = append(r.Segments, seg)
		}
	}
	if v, ok := m["reward"]; ok && v != nil {
		r.Reward, r.HasReward = float32(num(v)), true
	}
	if v, ok := m["feedback"].(float64); ok {
		r.Feedback, r.HasFeedback = int8(v), true
	}
	return r
}

// interopFile is what a fixture's name says: case, format, compression.
type interopFile struct {
	path, writer, name string
	kase               string
	format             Format
	codec              string // "", "lz4" or "zstd"
}

func parseInteropName(t *testing.T, writer, name string) interopFile {
	t.Helper()
	parts := strings.Split(strings.TrimSuffix(name, ".arrow"), ".")
	require.True(t, len(parts) == 2 || len(parts) == 3, "fixture name %s: want case.format[.codec].arrow", name)
	f := interopFile{path: filepath.Join(interopDir, writer, name), writer: writer, name: name, kase: parts[0]}
	switch parts[1] {
	case "file":
		f.format = FormatFile
	case "stream":
		f.format = FormatStream
	default:
		t.Fatalf("fixture name %s: format %q is neither file nor stream", name, parts[1])
	}
	if len(parts) == 3 {
		f.codec = parts[2]
		require.Contains(t, []string{"lz4", "zstd"}, f.codec, name)
	}
	return f
}

// TestInterop reads every fixture through the real reader: valid files give the
// spec's rollouts without a problem, each malformed file its code on the patched row
// and nothing on the others. Every writer has every file but those it cannot make.
func TestInterop(t *testing.T) {
	spec := loadInteropSpec(t)
	want := spec.rollouts(t)
	codes := map[string]Code{}
	for _, m := range spec.Malformed {
		codes[m.Name] = m.Code
	}
	for writer, na := range interopWriters {
		entries, err := os.ReadDir(filepath.Join(interopDir, writer))
		require.NoError(t, err, "writer %s has no fixtures", writer)
		have := map[string]bool{}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".arrow") {
				continue
			}
			have[e.Name()] = true
			f := parseInteropName(t, writer, e.Name())
			t.Run(writer+"/"+e.Name(), func(t *testing.T) { checkInteropFile(t, f, spec, want, codes) })
		}
		var missing []string
		for _, name := range interopExpectedNames(spec) {
			if !have[name] && na[name] == "" {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		require.Empty(t, missing, "writer %s lacks fixtures", writer)
	}
}

// interopExpectedNames lists the files every writer should have.
func interopExpectedNames(spec interopSpec) []string {
	var names []string
	for _, format := range []string{"file", "stream"} {
		for _, codec := range []string{"", ".lz4", ".zstd"} {
			names = append(names, "valid."+format+codec+".arrow")
		}
		for _, m := range spec.Malformed {
			names = append(names, m.Name+"."+format+".arrow")
		}
	}
	return names
}

func checkInteropFile(t *testing.T, f interopFile, spec interopSpec, want []*Rollout, codes map[string]Code) {
	rd, err := OpenReader(f.path, ReadOptions{VocabSize: 512, Tokenizer: "bytes-v1"})
	require.NoError(t, err)
	require.Equal(t, f.format, rd.Format())
	require.NoError(t, rd.Close())
	rows, open, err := fxReadAll(t, f.path, ReadOptions{VocabSize: 512, Tokenizer: "bytes-v1"})
	require.NoError(t, open)
	require.NoError(t, err)
	require.Len(t, rows, len(want))
	if strings.HasPrefix(f.kase, "valid") {
		for i, r := range rows {
			require.Nil(t, r.problems, "row %d: %v", i, r.problems)
			require.Equal(t, fxCompare(want[i]), fxCompare(r.r), "row %d", i)
		}
		return
	}
	code, ok := codes[f.kase]
	require.True(t, ok, "fixture %s: case %q is not in cases.json", f.name, f.kase)
	for i, r := range rows {
		if i != spec.Row {
			require.Nil(t, r.problems, "row %d: %v", i, r.problems)
			continue
		}
		require.NotEmpty(t, r.problems, "row %d should give %s", i, code)
		for _, p := range r.problems {
			require.Equal(t, code, p.Code, "row %d: %v", i, p)
			require.Equal(t, f.path, p.File)
			require.Equal(t, spec.Row, p.Row)
		}
	}
}

// TestInteropSpool takes one file of another writer (apache-arrow JS, file format,
// schema only in its footer) through the spool: claimed, every rollout accepted, the
// file in done/.
func TestInteropSpool(t *testing.T) {
	spec := loadInteropSpec(t)
	valid, err := filepath.Glob(filepath.Join(interopDir, "*", "valid*.arrow"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(valid), 14, "every writer's valid files, both formats")
	// Every writer's valid files end in done/ with the same rollouts, each through a
	// fresh spool (their rollout_ids are the same, so one spool would reject repeats).
	for _, path := range valid {
		name := filepath.Base(filepath.Dir(path)) + "-" + filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			s := openTestSpool(t, t.TempDir())
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(s.Dir(DirIncoming), name), data, 0o644))
			reps := ingestAll(t, s)
			require.Len(t, reps, 1)
			require.Nil(t, reps[0].Quarantine)
			require.Equal(t, OutcomeDone, reps[0].Outcome)
			require.Equal(t, len(spec.Rollouts), reps[0].Accepted)
			require.Zero(t, reps[0].Rejected)
			done, err := os.ReadDir(s.Dir(DirDone))
			require.NoError(t, err)
			require.Len(t, done, 1)
			require.True(t, strings.HasSuffix(done[0].Name(), name), done[0].Name())
			failed, err := os.ReadDir(s.Dir(DirFailed))
			require.NoError(t, err)
			require.Empty(t, failed)
			for _, m := range spec.Rollouts {
				_, ok := s.Journal().Accepted(m["rollout_id"].(string))
				require.True(t, ok, m["rollout_id"])
			}
		})
	}
}

// TestReaderFileFooterOnly checks what the JS fixtures stand for: the first message
// after the magic is not a schema, so the schema can only come from the footer.
func TestReaderFileFooterOnly(t *testing.T) {
	path := filepath.Join(interopDir, "js", "valid.file.arrow")
	rd, err := OpenReader(path, ReadOptions{})
	require.NoError(t, err)
	defer rd.Close()
	st, err := os.Stat(path)
	require.NoError(t, err)
	meta, err := rd.peekMessage(int64(len(fileMagic)), st.Size()-int64(len(fileMagic)))
	require.NoError(t, err)
	require.Nil(t, meta, "the JS file repeats its schema after the magic")
}

// TestReaderLeadingSchemaMismatch renames a column in the schema message after the
// magic only: the footer's schema reads, but the two disagree.
func TestReaderLeadingSchemaMismatch(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(interopDir, "pyarrow", "valid.file.arrow"))
	require.NoError(t, err)
	first := strings.Index(string(data), "rollout_id")
	require.Less(t, first, strings.LastIndex(string(data), "rollout_id"), "the schema is in the stream and the footer")
	bad := append([]byte(nil), data...)
	bad[first+len("rollout_id")-1] = 'X'
	path := filepath.Join(t.TempDir(), "bad.arrow")
	require.NoError(t, os.WriteFile(path, bad, 0o644))
	_, err = OpenReader(path, ReadOptions{})
	p := fxProblem(t, err, ETruncated)
	require.Contains(t, p.Reason, "the schema after the file magic differs from the footer's")
	require.Contains(t, p.Reason, "rollout_iX utf8")
}

// TestReaderFooterBlockOutside patches the footer's last record batch block to claim a
// 1 TiB body: the reader refuses the file before reading anything.
func TestReaderFooterBlockOutside(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(interopDir, "js", "valid.file.arrow"))
	require.NoError(t, err)
	n := int(binary.LittleEndian.Uint32(data[len(data)-10:]))
	footerStart := len(data) - 10 - n
	ft, err := parseFooter(data[footerStart:len(data)-10], int64(footerStart))
	require.NoError(t, err)
	require.Equal(t, 3, ft.batches)
	b := ft.blocks[len(ft.blocks)-1]
	pattern := make([]byte, 24)
	binary.LittleEndian.PutUint64(pattern, uint64(b.offset))
	binary.LittleEndian.PutUint32(pattern[8:], uint32(b.metaLen))
	binary.LittleEndian.PutUint64(pattern[16:], uint64(b.bodyLen))
	at := bytes.Index(data[footerStart:], pattern)
	require.GreaterOrEqual(t, at, 0, "block not found in the footer")
	bad := append([]byte(nil), data...)
	binary.LittleEndian.PutUint64(bad[footerStart+at+16:], 1<<40)
	path := filepath.Join(t.TempDir(), "bad.arrow")
	require.NoError(t, os.WriteFile(path, bad, 0o644))
	_, err = OpenReader(path, ReadOptions{})
	p := fxProblem(t, err, ETruncated)
	require.Contains(t, p.Reason, "record batch block 2")
	require.Contains(t, p.Reason, "is outside the file's")
}
