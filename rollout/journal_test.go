package rollout

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/wlog"
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

// TestJournalCorruptMiddleIsAnError: garbage with whole lines after it is not a torn
// append: the journal is refused with the line and its byte offset, and left as it is
// (cutting there would drop the claims after it).
func TestJournalCorruptMiddleIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	body := `{"op":"claim","seq":1,"name":"a.arrow"}` + "\nnot json\n" + `{"op":"claim","seq":2,"name":"b.arrow"}` + "\n"
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	_, err := OpenJournal(path)
	require.ErrorContains(t, err, path+": line 2 is corrupt (byte offset 40)")
	b, rerr := os.ReadFile(path)
	require.NoError(t, rerr)
	require.Equal(t, body, string(b))
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

// TestJournalRefusesWrongCallsBeforeWriting: a call the state does not allow is an
// error and writes nothing, so the journal still opens afterwards.
func TestJournalRefusesWrongCallsBeforeWriting(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	c, err := j.Claim("a.arrow")
	require.NoError(t, err)
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	require.ErrorContains(t, j.Decide(c.Seq+7, nil), "decide for unknown or finished claim 8")
	require.ErrorContains(t, j.Finish(c.Seq+7, OutcomeDone, "", ""), "finish for unknown or finished claim 8")
	require.NoError(t, j.Decide(c.Seq, []RowDecision{{Row: 0, ID: "x", Accepted: true}}))
	require.ErrorContains(t, j.Decide(c.Seq, nil), "decided twice")
	require.ErrorContains(t, j.append(Entry{Op: OpSnapshot}), "only by Compact")
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, 2, bytes.Count(after, []byte("\n")), "one claim and one decide line: %s", after[len(before):])
	require.NoError(t, j.Close())
	j, err = OpenJournal(path)
	require.NoError(t, err)
	_, ok := j.Accepted("x")
	require.True(t, ok)
	require.NoError(t, j.Close())
}

// TestJournalFailedAppendIsCutOff: an append that fails with a full disk in the middle
// of its write, or at its fsync, is cut off and changes nothing; the retry succeeds
// and the journal replays.
func TestJournalFailedAppendIsCutOff(t *testing.T) {
	for _, phase := range []string{wlog.FaultWrite, wlog.FaultSync} {
		t.Run(phase, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			j, err := OpenJournal(path)
			require.NoError(t, err)
			_, err = j.Claim("a.arrow")
			require.NoError(t, err)
			good, err := os.ReadFile(path)
			require.NoError(t, err)
			defer wlog.InjectFault(wlog.Fault{Name: "journal.jsonl", Append: 1, Phase: phase})()
			_, err = j.Claim("b.arrow")
			require.ErrorIs(t, err, syscall.ENOSPC)
			after, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(good), string(after), "the failed append is cut off")
			require.Equal(t, uint64(1), j.Totals().LastSeq, "nor is it applied")
			c, err := j.Claim("b.arrow")
			require.NoError(t, err)
			require.Equal(t, uint64(2), c.Seq)
			require.NoError(t, j.Close())
			j, err = OpenJournal(path)
			require.NoError(t, err, "no torn line in the middle")
			defer j.Close()
			require.Equal(t, int64(2), j.Totals().FilesClaimed)
		})
	}
}

// journalState is everything a replay of the journal rebuilds.
type journalState struct {
	Totals     Totals
	Accepted   map[string]uint64
	Unfinished []*ClaimState
}

func stateOf(j *Journal) journalState {
	j.mu.Lock()
	acc := maps.Clone(j.accepted)
	j.mu.Unlock()
	return journalState{Totals: j.Totals(), Accepted: acc, Unfinished: j.Unfinished()}
}

// replayed returns the state of the journal at path, opened without compacting it.
func replayed(t *testing.T, path string) journalState {
	t.Helper()
	j, err := openJournal(path, false)
	require.NoError(t, err)
	defer j.Close()
	return stateOf(j)
}

// fillJournal drives j through steps random claims, decisions and finishes, in the
// order the spool may make them (a claim is decided, and finished, later or never), and
// returns every rollout_id it used. As in the spool, a rollout_id accepted before is
// rejected.
func fillJournal(t *testing.T, j *Journal, rng *rand.Rand, steps int) []string {
	t.Helper()
	var ids []string
	var open []uint64 // unfinished claims
	for range steps {
		k := rng.IntN(10)
		switch {
		case k < 4 || len(open) == 0:
			c, err := j.Claim(fmt.Sprintf("f%d.arrow", rng.IntN(1000)))
			require.NoError(t, err)
			open = append(open, c.Seq)
		case k < 7:
			c := j.Open(open[rng.IntN(len(open))])
			if c.Decided {
				continue
			}
			rows := make([]RowDecision, rng.IntN(6))
			inFile := map[string]bool{}
			for r := range rows {
				id := fmt.Sprintf("r%d", rng.IntN(3*steps))
				ids = append(ids, id)
				_, dup := j.Accepted(id)
				switch {
				case dup || inFile[id]:
					rows[r] = RowDecision{Row: r, ID: id, Code: EDupRollout}
				case rng.IntN(4) == 0:
					rows[r] = RowDecision{Row: r, ID: id, Code: ELenMismatch}
				default:
					rows[r] = RowDecision{Row: r, ID: id, Accepted: true, Tokens: rng.Int64N(1000)}
					inFile[id] = true
				}
			}
			require.NoError(t, j.Decide(c.Seq, rows))
		default:
			i := rng.IntN(len(open))
			c := j.Open(open[i])
			outcome, code, reason := OutcomeFailed, Code(""), ""
			switch {
			case c.Decided && slices.ContainsFunc(c.Decisions, func(d RowDecision) bool { return d.Accepted }):
				outcome = OutcomeDone
			case !c.Decided && rng.IntN(2) == 0:
				outcome = OutcomeVanished
			case !c.Decided:
				outcome, code, reason = OutcomeQuarantined, ETruncated, "the file ends early"
			}
			require.NoError(t, j.Finish(c.Seq, outcome, code, reason))
			open = slices.Delete(open, i, i+1)
		}
	}
	return ids
}

// writeTestJournal writes, without the API's fsyncs, a journal of files finished files
// of rows rows each (the last row rejected, the others accepted, ids "<prefix>-<file>-<row>"),
// then open claims, decided but unfinished.
func writeTestJournal(tb testing.TB, path string, files, open, rows int, prefix string) {
	tb.Helper()
	f, err := os.Create(path)
	require.NoError(tb, err)
	defer f.Close()
	w := bufio.NewWriter(f)
	at := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	put := func(e Entry) {
		b, err := json.Marshal(e)
		require.NoError(tb, err)
		w.Write(append(b, '\n'))
	}
	for seq := uint64(1); seq <= uint64(files+open); seq++ {
		put(Entry{Op: OpClaim, Seq: seq, At: at, Name: fmt.Sprintf("collector-%d.arrow", seq)})
		ds := make([]RowDecision, rows)
		for r := range ds {
			ds[r] = RowDecision{Row: r, ID: fmt.Sprintf("%s-%06d-%d", prefix, seq, r), Accepted: true, Tokens: 4096}
		}
		ds[rows-1].Accepted, ds[rows-1].Tokens, ds[rows-1].Code = false, 0, ELenMismatch
		put(Entry{Op: OpDecide, Seq: seq, At: at, Rows: ds})
		if seq <= uint64(files) {
			put(Entry{Op: OpFinish, Seq: seq, At: at, Outcome: OutcomeDone})
		}
	}
	require.NoError(tb, w.Flush())
}

func copyFile(tb testing.TB, from, to string) {
	tb.Helper()
	b, err := os.ReadFile(from)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(to, b, 0o644))
}

// firstLine returns the first line of the file at path, and how many lines it has.
func firstLine(t *testing.T, path string) (Entry, int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := bytes.SplitAfter(b, []byte("\n"))
	var e Entry
	require.NoError(t, json.Unmarshal(lines[0], &e))
	return e, bytes.Count(b, []byte("\n"))
}

func TestJournalCompactReplaysTheSameState(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			dir := t.TempDir()
			path, plain := filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "plain.jsonl")
			j, err := OpenJournal(path)
			require.NoError(t, err)
			ids := fillJournal(t, j, rand.New(rand.NewPCG(seed, 1)), 300)
			before := stateOf(j)
			require.NotEmpty(t, before.Unfinished)
			require.Positive(t, before.Totals.FilesDone)
			copyFile(t, path, plain)

			require.NoError(t, j.Compact())
			require.Equal(t, before, stateOf(j), "Compact changes no state")
			st, ok := j.LastCompaction()
			require.True(t, ok)
			require.NoError(t, st.Err)
			info, err := os.Stat(path)
			require.NoError(t, err)
			require.Equal(t, info.Size(), st.BytesAfter)
			require.Less(t, st.BytesAfter, st.BytesBefore)
			require.NoError(t, j.Close())

			snap, n := firstLine(t, path)
			require.Equal(t, OpSnapshot, snap.Op)
			require.Len(t, snap.Open, len(before.Unfinished))
			require.Equal(t, 1+len(before.Unfinished)+countDecided(before.Unfinished), n,
				"a snapshot, then each unfinished claim's claim and decide lines")

			want := replayed(t, plain)
			require.Equal(t, want, replayed(t, path))
			wj, err := openJournal(plain, false)
			require.NoError(t, err)
			defer wj.Close()
			gj, err := openJournal(path, false)
			require.NoError(t, err)
			defer gj.Close()
			for _, id := range ids {
				wseq, wok := wj.Accepted(id)
				gseq, gok := gj.Accepted(id)
				require.Equal(t, wok, gok, id)
				require.Equal(t, wseq, gseq, id)
			}

			require.NoError(t, gj.Compact(), "a compacted journal compacts again")
			require.Equal(t, want, replayed(t, path))
		})
	}
}

func countDecided(cs []*ClaimState) int {
	n := 0
	for _, c := range cs {
		if c.Decided {
			n++
		}
	}
	return n
}

func TestJournalAppendsAfterCompact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	fillJournal(t, j, rand.New(rand.NewPCG(7, 7)), 200)
	require.NoError(t, j.Compact())
	last := j.Totals().LastSeq

	// Finish every claim the snapshot lists as open, then claim and decide a new file.
	for _, c := range j.Unfinished() {
		if !c.Decided {
			require.NoError(t, j.Decide(c.Seq, []RowDecision{{Row: 0, ID: fmt.Sprint("late-", c.Seq), Accepted: true, Tokens: 5}}))
		}
		require.NoError(t, j.Finish(c.Seq, OutcomeDone, "", ""))
	}
	c, err := j.Claim("new.arrow")
	require.NoError(t, err)
	require.Equal(t, last+1, c.Seq)
	require.NoError(t, j.Decide(c.Seq, []RowDecision{{Row: 0, ID: "fresh", Accepted: true, Tokens: 9}}))
	want := stateOf(j)
	require.NoError(t, j.Close())

	require.Equal(t, want, replayed(t, path))
	j, err = OpenJournal(path)
	require.NoError(t, err)
	defer j.Close()
	seq, ok := j.Accepted("fresh")
	require.True(t, ok)
	require.Equal(t, c.Seq, seq)
}

func TestJournalCompactWhileAppending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	stop, compacted := make(chan struct{}), make(chan error)
	go func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				compacted <- nil
				return
			default:
			}
			if err := j.Compact(); err != nil {
				compacted <- fmt.Errorf("compaction %d: %w", n, err)
				return
			}
		}
	}()
	fillJournal(t, j, rand.New(rand.NewPCG(3, 3)), 300)
	close(stop)
	require.NoError(t, <-compacted)
	want := stateOf(j)
	require.NoError(t, j.Close())
	got := replayed(t, path)
	// A decision of no rows is an empty slice in memory and none after a replay.
	for _, c := range append(want.Unfinished, got.Unfinished...) {
		if len(c.Decisions) == 0 {
			c.Decisions = nil
		}
	}
	require.Equal(t, want, got)
}

func TestJournalAutoCompact(t *testing.T) {
	for name, tc := range map[string]struct {
		files, rows int
		prefix      string
		compact     bool
	}{
		"one file below the threshold": {files: CompactMinFinished - 1, rows: 8, prefix: "rollout", compact: false},
		"at the threshold":             {files: CompactMinFinished, rows: 8, prefix: "rollout", compact: true},
		"would not halve":              {files: CompactMinFinished, rows: 8, prefix: strings.Repeat("x", 1000), compact: false},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path, plain := filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "plain.jsonl")
			writeTestJournal(t, path, tc.files, 3, tc.rows, tc.prefix)
			copyFile(t, path, plain)
			j, err := OpenJournal(path)
			require.NoError(t, err)
			st, ok := j.LastCompaction()
			require.Equal(t, tc.compact, ok)
			require.NoError(t, j.Close())
			require.Equal(t, replayed(t, plain), replayed(t, path))
			snap, _ := firstLine(t, path)
			if !tc.compact {
				require.Equal(t, OpClaim, snap.Op)
				return
			}
			require.NoError(t, st.Err)
			require.Equal(t, OpSnapshot, snap.Op)
			require.Less(t, CompactMinRatio*st.BytesAfter, st.BytesBefore)

			j, err = OpenJournal(path)
			require.NoError(t, err)
			defer j.Close()
			_, ok = j.LastCompaction()
			require.False(t, ok, "no finished files since the snapshot")
		})
	}
}

// compactedJournal returns the lines of a small compacted journal with unfinished
// claims, and its state.
func compactedJournal(t *testing.T) ([]string, journalState) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	fillJournal(t, j, rand.New(rand.NewPCG(5, 5)), 100)
	require.NoError(t, j.Compact())
	require.NoError(t, j.Close())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(b), "\n")
	require.Greater(t, len(lines), 2)
	return lines[:len(lines)-1], replayed(t, path)
}

func TestJournalSnapshotOnlyFirst(t *testing.T) {
	lines, _ := compactedJournal(t)
	claim := `{"op":"claim","seq":1000,"at":"2026-01-02T03:04:05Z","name":"z.arrow"}` + "\n"
	for name, tc := range map[string]struct {
		body string
		line int
	}{
		"after a claim":    {claim + strings.Join(lines, ""), 2},
		"a second one":     {strings.Join(lines, "") + lines[0], len(lines) + 1},
		"in the open part": {lines[0] + lines[1] + lines[0] + strings.Join(lines[2:], ""), 3},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
			_, err := OpenJournal(path)
			require.ErrorContains(t, err, fmt.Sprintf("line %d: a snapshot is valid only as the first line", tc.line))
		})
	}
}

func TestJournalRejectsInconsistentSnapshots(t *testing.T) {
	const at = `"at":"2026-01-02T03:04:05Z"`
	for name, tc := range map[string]struct{ body, err string }{
		"no totals": {`{"op":"snapshot",` + at + `}`, "snapshot without totals"},
		"an open claim has no claim line": {
			`{"op":"snapshot",` + at + `,"totals":{"last_seq":3},"open":[2]}`,
			"open claims [2] have no claim line"},
		"a claim neither open nor new": {
			`{"op":"snapshot",` + at + `,"totals":{"last_seq":3}}` + "\n" + `{"op":"claim","seq":2,` + at + `,"name":"a.arrow"}`,
			"line 2: claim seq 2 after seq 3"},
		"an open claim after the last seq": {
			`{"op":"snapshot",` + at + `,"totals":{"last_seq":3},"open":[4]}`,
			"snapshot lists open claim 4"},
		"a rollout accepted twice": {
			`{"op":"snapshot",` + at + `,"totals":{"last_seq":3},"accepted":[{"seq":1,"ids":["a"]},{"seq":2,"ids":["a"]}]}`,
			"snapshot lists rollout a twice"},
		"rollouts of an open claim": {
			`{"op":"snapshot",` + at + `,"totals":{"last_seq":3},"open":[2],"accepted":[{"seq":2,"ids":["a"]}]}`,
			"snapshot lists rollouts of claim 2"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.body+"\n"), 0o644))
			_, err := OpenJournal(path)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func TestJournalTornTailAfterSnapshot(t *testing.T) {
	lines, want := compactedJournal(t)
	body := strings.Join(lines, "")
	for name, tc := range map[string]struct {
		body string
		err  string
	}{
		"no newline":       {body: body + `{"op":"claim","seq":2000,"na`},
		"garbled line":     {body: body + "{\"op\":\"cla\x00\x00\n"},
		"torn snapshot":    {body: lines[0][:len(lines[0])/2], err: "line 1 is a damaged snapshot"},
		"garbled snapshot": {body: lines[0][:len(lines[0])/2] + "\n", err: "line 1 is a damaged snapshot"},
		"snapshot cut off": {body: lines[0][:len(lines[0])/2] + "\n" + strings.Join(lines[1:], ""), err: "line 1 is corrupt"},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.jsonl")
			require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
			j, err := OpenJournal(path)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, stateOf(j))
			c, err := j.Claim("next.arrow") // appends after the cut, not after the garbage
			require.NoError(t, err)
			require.Equal(t, want.Totals.LastSeq+1, c.Seq)
			require.NoError(t, j.Close())
			require.Equal(t, want.Totals.FilesClaimed+1, replayed(t, path).Totals.FilesClaimed)
		})
	}
}

// TestJournalCompactCrash: a crash while the compacted journal was being written leaves
// its temp file beside the old journal, which is the journal.
func TestJournalCompactCrash(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	fillJournal(t, j, rand.New(rand.NewPCG(9, 9)), 100)
	require.NoError(t, j.Close())
	want := replayed(t, path)
	lines, _ := compactedJournal(t) // another journal's, half written
	stray := filepath.Join(dir, ".journal.jsonl.tmp-123456")
	require.NoError(t, os.WriteFile(stray, []byte(lines[0][:len(lines[0])/2]), 0o600))
	other := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(other, []byte("not ours"), 0o644))

	j, err = OpenJournal(path)
	require.NoError(t, err)
	defer j.Close()
	require.Equal(t, want, stateOf(j))
	require.NoFileExists(t, stray)
	require.FileExists(t, other)
}

// TestJournalCompactFailureKeepsJournal: a compaction that cannot rename its file into
// place leaves no temp file, and the old journal in use.
func TestJournalCompactFailureKeepsJournal(t *testing.T) {
	dir := t.TempDir()
	path, moved := filepath.Join(dir, "journal.jsonl"), filepath.Join(dir, "moved.jsonl")
	j, err := OpenJournal(path)
	require.NoError(t, err)
	fillJournal(t, j, rand.New(rand.NewPCG(11, 11)), 100)
	// The open journal moves away (its file handle with it), and a folder that is not
	// empty takes its name, so the rename over it fails.
	require.NoError(t, os.Rename(path, moved))
	require.NoError(t, os.MkdirAll(filepath.Join(path, "x"), 0o755))

	require.Error(t, j.Compact())
	st, ok := j.LastCompaction()
	require.True(t, ok)
	require.Error(t, st.Err)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		require.NotContains(t, e.Name(), ".tmp-", "the temp file is removed")
	}
	c, err := j.Claim("after.arrow")
	require.NoError(t, err)
	want := stateOf(j)
	require.NoError(t, j.Close())

	require.NoError(t, os.RemoveAll(path))
	require.NoError(t, os.Rename(moved, path))
	got := replayed(t, path)
	require.Equal(t, c.Seq, got.Totals.LastSeq, "the claim after the failure was appended to the old journal")
	require.Equal(t, want.Totals, got.Totals)
	require.Equal(t, want.Accepted, got.Accepted)
}

// BenchmarkJournalOpen opens a journal of 20k finished files of 8 rollouts each (and 4
// unfinished): as written, without compacting it; compacted; and the first open, which
// compacts it.
func BenchmarkJournalOpen(b *testing.B) {
	const files, rows = 20_000, 8
	dir := b.TempDir()
	plain, compacted := filepath.Join(dir, "plain.jsonl"), filepath.Join(dir, "compacted.jsonl")
	writeTestJournal(b, plain, files, 4, rows, "rollout")
	copyFile(b, plain, compacted)
	j, err := OpenJournal(compacted)
	require.NoError(b, err)
	st, ok := j.LastCompaction()
	require.True(b, ok)
	require.NoError(b, j.Close())

	open := func(b *testing.B, path string, bytes int64) {
		b.ReportMetric(float64(bytes), "journal-bytes")
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			j, err := openJournal(path, false)
			if err != nil {
				b.Fatal(err)
			}
			j.Close()
		}
	}
	b.Run("uncompacted", func(b *testing.B) { open(b, plain, st.BytesBefore) })
	b.Run("compacted", func(b *testing.B) { open(b, compacted, st.BytesAfter) })
	b.Run("compacting", func(b *testing.B) {
		b.ReportAllocs()
		path := filepath.Join(dir, "journal.jsonl")
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			copyFile(b, plain, path)
			b.StartTimer()
			j, err := OpenJournal(path)
			if err != nil {
				b.Fatal(err)
			}
			j.Close()
		}
	})
}
