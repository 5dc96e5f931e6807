package wlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// rec is the records of these tests: {"n":N}.
type rec struct {
	N int `json:"n"`
}

// reader replays a log of recs into got.
func reader(got *[]int) Options {
	return Options{Replay: JSON(func(r *rec) error {
		*got = append(*got, r.N)
		return nil
	})}
}

// written appends recs 1…n to a new log at path and closes it.
func written(t *testing.T, path string, n int) {
	t.Helper()
	l, err := Open(path, Options{})
	require.NoError(t, err)
	for i := 1; i <= n; i++ {
		require.NoError(t, l.AppendJSON(rec{N: i}))
	}
	require.NoError(t, l.Close())
}

// replayed opens the log at path and returns its records and the log.
func replayed(t *testing.T, path string) ([]int, *Log) {
	t.Helper()
	var got []int
	l, err := Open(path, reader(&got))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return got, l
}

func TestAppendReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "log.jsonl")
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	written(t, path, 3)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n", string(b))
	got, l := replayed(t, path)
	require.Equal(t, []int{1, 2, 3}, got)
	require.Equal(t, int64(len(b)), l.Size())
	require.ErrorContains(t, l.Append([]byte("a\nb")), "holds a newline")
	require.NoError(t, l.Close())
	require.ErrorIs(t, l.Append([]byte("{}")), os.ErrClosed)
}

// TestTornTail: a last line without its newline, or one that does not decode, is cut;
// the next append starts a clean line after the whole ones.
func TestTornTail(t *testing.T) {
	for name, tail := range map[string]string{
		"no newline":                 `{"n":`,
		"decodes but has no newline": `{"n":9}`,
		"garbled line":               "{\"n\x00\x00\n",
		"zeros a crash left":         "\x00\x00\x00\x00",
		"blank line":                 "\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log.jsonl")
			written(t, path, 2)
			good, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, append(good, tail...), 0o644))

			var seen []string
			var got []int
			o := reader(&got)
			o.Torn = func(line int, b []byte) error {
				seen = append(seen, fmt.Sprintf("%d:%s", line, b))
				return nil
			}
			l, err := Open(path, o)
			require.NoError(t, err)
			require.Equal(t, []int{1, 2}, got)
			require.Equal(t, []string{"3:" + tail}, seen)
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(good), string(b), "the torn line is cut off the file")
			require.NoError(t, l.AppendJSON(rec{N: 3}))
			require.NoError(t, l.Close())
			got, _ = replayed(t, path)
			require.Equal(t, []int{1, 2, 3}, got)
		})
	}
}

// TestTornRefused: a Torn function that refuses the cut fails Open, file untouched.
func TestTornRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	require.NoError(t, os.WriteFile(path, []byte(`{"n":1}`+"\n"+`{"n`), 0o644))
	_, err := Open(path, Options{Torn: func(line int, b []byte) error { return fmt.Errorf("line %d must not be torn", line) }})
	require.ErrorContains(t, err, "line 2 must not be torn")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, `{"n":1}`+"\n"+`{"n`, string(b))
}

// TestCorruptMiddleRefused: a line that does not decode with lines after it is refused
// with the file, the line and its offset; nothing is cut or changed.
func TestCorruptMiddleRefused(t *testing.T) {
	for name, bad := range map[string]string{
		"garbage":            "not json",
		"zeros":              "\x00\x00\x00\x00",
		"half a record":      `{"n":`,
		"blank line":         "",
		"two records joined": `{"n":2}{"n":3}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log.jsonl")
			body := `{"n":1}` + "\n" + bad + "\n" + `{"n":4}` + "\n" + `{"n`
			require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
			var got []int
			_, err := Open(path, reader(&got))
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, path, ce.Path)
			require.Equal(t, 2, ce.Line)
			require.Equal(t, int64(len(`{"n":1}`+"\n")), ce.Offset)
			require.Equal(t, int64(len(`{"n":4}`+"\n"+`{"n`)), ce.After)
			require.ErrorContains(t, err, path+": line 2 is corrupt (byte offset 8)")
			require.ErrorContains(t, err, "nothing was changed")
			b, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, body, string(b), "a refused log is not cut")
		})
	}
}

// TestReplayErrorIsFatal: an error that is not Corrupt fails Open even on the last
// line: the line is whole, so it was acknowledged, and cutting it would lose it.
func TestReplayErrorIsFatal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	written(t, path, 3)
	_, err := Open(path, Options{Replay: JSON(func(r *rec) error {
		if r.N == 3 {
			return errors.New("three is not allowed")
		}
		return nil
	})})
	require.ErrorContains(t, err, "line 3: three is not allowed (byte offset 16)")
	got, _ := replayed(t, path)
	require.Equal(t, []int{1, 2, 3}, got)
}

// TestFailedAppendIsCutOff: ENOSPC in the middle of an append's write, or at its
// fsync, is returned as such and the log is cut back to its last whole line, so the
// retry lands on a clean line and the log replays.
func TestFailedAppendIsCutOff(t *testing.T) {
	for _, phase := range []string{FaultWrite, FaultSync} {
		t.Run(phase, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log.jsonl")
			written(t, path, 2)
			before, err := os.ReadFile(path)
			require.NoError(t, err)
			defer InjectFault(Fault{Name: "log.jsonl", Append: 2, Phase: phase})()
			_, l := replayed(t, path)
			require.NoError(t, l.AppendJSON(rec{N: 3}))
			before = append(before, "{\"n\":3}\n"...)

			err = l.AppendJSON(rec{N: 4})
			require.ErrorIs(t, err, syscall.ENOSPC)
			require.ErrorContains(t, err, path+": no space left on device")
			b, rerr := os.ReadFile(path)
			require.NoError(t, rerr)
			require.Equal(t, string(before), string(b), "the failed append is cut off")
			require.Equal(t, int64(len(before)), l.Size())

			require.NoError(t, l.AppendJSON(rec{N: 4}), "the retry")
			require.NoError(t, l.Close())
			got, _ := replayed(t, path)
			require.Equal(t, []int{1, 2, 3, 4}, got)
		})
	}
}

// TestFaultCountsOnlyMatchingLogs: a fault counts the appends of logs of its name.
func TestFaultCountsOnlyMatchingLogs(t *testing.T) {
	dir := t.TempDir()
	defer InjectFault(Fault{Name: "a-*.jsonl", Append: 2, Phase: FaultWrite})()
	a1, err := Open(filepath.Join(dir, "a-1.jsonl"), Options{})
	require.NoError(t, err)
	defer a1.Close()
	a2, err := Open(filepath.Join(dir, "a-2.jsonl"), Options{})
	require.NoError(t, err)
	defer a2.Close()
	b, err := Open(filepath.Join(dir, "b.jsonl"), Options{})
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Append([]byte("1")))
	require.NoError(t, a1.Append([]byte("1")))
	require.NoError(t, b.Append([]byte("2")))
	require.ErrorIs(t, a2.Append([]byte("1")), syscall.ENOSPC)
	require.NoError(t, a2.Append([]byte("1")))
	require.NoError(t, a1.Append([]byte("2")))
}

func TestParseFaults(t *testing.T) {
	fs, err := ParseFaults("journal.jsonl:3, skipped.txt:1:sync")
	require.NoError(t, err)
	require.Equal(t, []Fault{{Name: "journal.jsonl", Append: 3, Phase: FaultWrite}, {Name: "skipped.txt", Append: 1, Phase: FaultSync}}, fs)
	for _, bad := range []string{"", "journal.jsonl", "journal.jsonl:0", "journal.jsonl:x", "journal.jsonl:1:later", ":1", "[:1"} {
		_, err := ParseFaults(bad)
		require.Error(t, err, bad)
	}
}

func TestRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.jsonl")
	written(t, path, 4)
	require.NoError(t, os.Chmod(path, 0o600))
	_, l := replayed(t, path)
	require.NoError(t, l.Rewrite(func(w io.Writer) error {
		_, err := io.WriteString(w, "{\"n\":10}\n")
		return err
	}))
	require.Equal(t, int64(len("{\"n\":10}\n")), l.Size())
	require.NoError(t, l.AppendJSON(rec{N: 11}), "appends go to the new file")
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the mode is kept")

	// A failed rewrite leaves the log as it was, in use, and no temp file.
	require.ErrorContains(t, l.Rewrite(func(w io.Writer) error {
		io.WriteString(w, "{\"n\":")
		return errors.New("out of ideas")
	}), "out of ideas")
	require.ErrorContains(t, l.Rewrite(func(w io.Writer) error {
		_, err := io.WriteString(w, "{\"n\":1}")
		return err
	}), "does not end with a whole line")
	require.NoError(t, l.AppendJSON(rec{N: 12}))
	require.NoError(t, l.Close())
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, ents, 1, "no temp file is left")
	got, _ := replayed(t, path)
	require.Equal(t, []int{10, 11, 12}, got)
}

// TestOpenRemovesCrashedRewrite: a crash during Rewrite leaves its temp file beside
// the old log, which is the log; Open removes the temp and nothing else.
func TestOpenRemovesCrashedRewrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "log.jsonl")
	written(t, path, 2)
	stray := filepath.Join(dir, ".log.jsonl.tmp-123456")
	require.NoError(t, os.WriteFile(stray, []byte(`{"n":`), 0o600))
	other := filepath.Join(dir, ".other.jsonl.tmp-1")
	require.NoError(t, os.WriteFile(other, nil, 0o600))
	got, _ := replayed(t, path)
	require.Equal(t, []int{1, 2}, got)
	require.NoFileExists(t, stray)
	require.FileExists(t, other)
}

// FuzzReplay: whatever the bytes, Open either refuses them with a CorruptionError
// and changes nothing, or keeps a prefix of whole lines that replays again to the
// same records.
func FuzzReplay(f *testing.F) {
	f.Add([]byte("{\"n\":1}\n{\"n\":2}\n"))
	f.Add([]byte("{\"n\":1}\nxx\n{\"n\":2}\n{\"n"))
	f.Add([]byte("\x00\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		path := filepath.Join(t.TempDir(), "log.jsonl")
		require.NoError(t, os.WriteFile(path, body, 0o644))
		var got []int
		l, err := Open(path, reader(&got))
		after, rerr := os.ReadFile(path)
		require.NoError(t, rerr)
		if err != nil {
			var ce *CorruptionError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, string(body), string(after))
			return
		}
		l.Close()
		require.True(t, strings.HasPrefix(string(body), string(after)))
		require.True(t, len(after) == 0 || after[len(after)-1] == '\n')
		again, _ := replayed(t, path)
		require.Equal(t, got, again)
	})
}
