package rollout

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJournalReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	c1, err := j.Claim("a.arrow")
	require.NoError(t, err)
	require.Equal(t, uint64(1), c1.Seq)
	require.NoError(t, j.Decide(1, []RowDecision{{Row: 0, ID: "r1", Accepted: true, Tokens: 10}, {Row: 1, ID: "r2", Code: ELenMismatch}}))
	require.NoError(t, j.Finish(1, OutcomeDone, "", ""))
	c2, err := j.Claim("b.arrow")
	require.NoError(t, err)
	require.Equal(t, uint64(2), c2.Seq)
	require.NoError(t, j.Close())

	j, err = OpenJournal(path)
	require.NoError(t, err)
	defer j.Close()
	require.Equal(t, Totals{FilesClaimed: 2, FilesDone: 1, RolloutsAccepted: 1, RolloutsRejected: 1, TokensAccepted: 10, LastSeq: 2}, j.Totals())
	seq, ok := j.Accepted("r1")
	require.True(t, ok)
	require.Equal(t, uint64(1), seq)
	_, ok = j.Accepted("r2")
	require.False(t, ok, "a rejected rollout is not accepted")
	open := j.Unfinished()
	require.Len(t, open, 1)
	require.Equal(t, "00000002-b.arrow", open[0].ClaimedName())
	require.False(t, open[0].Decided)
}

func TestJournalTornTail(t *testing.T) {
	for name, tail := range map[string]string{
		"no newline":   `{"op":"claim","seq":2,"name":"b.ar`,
		"garbled line": "{\"op\":\"cla\x00\x00\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			j, err := OpenJournal(path)
			require.NoError(t, err)
			_, err = j.Claim("a.arrow")
			require.NoError(t, err)
			require.NoError(t, j.Close())
			good, err := os.ReadFile(path)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(path, append(append([]byte{}, good...), tail...), 0o644))

			j, err = OpenJournal(path)
			require.NoError(t, err)
			require.Equal(t, uint64(1), j.Totals().LastSeq)
			c, err := j.Claim("b.arrow") // appends after the cut, not after the garbage
			require.NoError(t, err)
			require.Equal(t, uint64(2), c.Seq)
			require.NoError(t, j.Close())
			j, err = OpenJournal(path)
			require.NoError(t, err)
			require.Equal(t, int64(2), j.Totals().FilesClaimed)
			j.Close()
		})
	}
}

func TestJournalCorruptMiddleIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	body := `{"op":"claim","seq":1,"name":"a.arrow"}` + "\nnot json\n" + `{"op":"claim","seq":2,"name":"b.arrow"}` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	_, err := OpenJournal(path)
	require.ErrorContains(t, err, "line 2 is corrupt")
}

func TestJournalRejectsInconsistentEntries(t *testing.T) {
	for name, body := range map[string]string{
		"decide unknown claim": `{"op":"decide","seq":5,"rows":[]}`,
		"seq goes backwards":   `{"op":"claim","seq":2,"name":"a.arrow"}` + "\n" + `{"op":"claim","seq":1,"name":"b.arrow"}`,
		"unknown op":           `{"op":"explode","seq":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(body+"\n"), 0o644))
			_, err := OpenJournal(path)
			require.Error(t, err)
		})
	}
}

func TestJournalFailedAppendIsCutOff(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	_, err = j.Claim("a.arrow")
	require.NoError(t, err)
	good, err := os.ReadFile(path)
	require.NoError(t, err)
	// A write that got half a line onto the disk before failing.
	_, err = j.f.Write([]byte(`{"op":"claim","seq":2,"na`))
	require.NoError(t, err)
	require.ErrorContains(t, j.undo(int64(len(good)), os.ErrClosed), "file already closed")
	_, err = j.Claim("b.arrow")
	require.NoError(t, err)
	require.NoError(t, j.Close())
	j, err = OpenJournal(path)
	require.NoError(t, err, "no torn line in the middle")
	defer j.Close()
	require.Equal(t, int64(2), j.Totals().FilesClaimed)
}
