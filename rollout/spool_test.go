package rollout

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

func openTestSpool(t *testing.T, root string) *Spool {
	t.Helper()
	s, err := OpenSpool(filepath.Join(root, "spool"), filepath.Join(root, "state", "journal.jsonl"), ReadOptions{}, zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func synthRollouts(prefix string, n int) []*Rollout {
	opts := SynthOptions{Tokens: 600, Seed: 7, IDPrefix: prefix}
	out := make([]*Rollout, n)
	for i := range out {
		out[i] = Synthesize(opts, i)
	}
	return out
}

func drop(t *testing.T, s *Spool, name string, rs []*Rollout) {
	t.Helper()
	require.NoError(t, WriteFile(filepath.Join(s.Dir(DirIncoming), name), rs, WriteOptions{}))
}

// ingestAll claims, processes and finishes everything pending, like the daemon.
func ingestAll(t *testing.T, s *Spool) []*FileReport {
	t.Helper()
	names, err := s.Pending()
	require.NoError(t, err)
	var reps []*FileReport
	for _, n := range names {
		c, err := s.Claim(n)
		require.NoError(t, err)
		rep, err := s.Process(t.Context(), c)
		require.NoError(t, err)
		if rep.Quarantine == nil {
			require.NoError(t, s.Finish(c, rep))
		}
		reps = append(reps, rep)
	}
	return reps
}

func TestSpoolIngest(t *testing.T) {
	s := openTestSpool(t, t.TempDir())
	good := synthRollouts("good", 3)
	drop(t, s, "a.arrow", good)
	mixed := synthRollouts("mixed", 3)
	mixed[1].LogProbs = append([]float32(nil), mixed[1].LogProbs...)
	mixed[1].LogProbs[len(mixed[1].LogProbs)-3] = float32(math.Inf(1)) // a sampled (non-null) position
	drop(t, s, "b.arrow", mixed)
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(DirIncoming), "c.arrow"), []byte("not arrow at all"), 0o644))
	// Collectors' temp files and hidden files are not claimed.
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(DirIncoming), "d.arrow.tmp"), []byte("half"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir(DirIncoming), ".e.arrow"), []byte("x"), 0o644))

	reps := ingestAll(t, s)
	require.Len(t, reps, 3)
	byName := map[string]*FileReport{}
	for _, r := range reps {
		byName[r.Name] = r
	}
	require.Equal(t, OutcomeDone, byName["a.arrow"].Outcome)
	require.Equal(t, 3, byName["a.arrow"].Accepted)
	b := byName["b.arrow"]
	require.Equal(t, OutcomeDone, b.Outcome)
	require.Equal(t, 2, b.Accepted)
	require.Equal(t, 1, b.Rejected)
	require.Equal(t, ELogprobInf, b.Problems[0].Code)
	c := byName["c.arrow"]
	require.Equal(t, OutcomeQuarantined, c.Outcome)
	require.Equal(t, ENotArrow, c.Quarantine.Code)

	// failed/ holds the quarantined file with its reason, and b's rejected row as it was.
	errText, err := os.ReadFile(filepath.Join(s.Dir(DirFailed), stem(c.Claimed)+ErrorSuffix))
	require.NoError(t, err)
	require.Contains(t, string(errText), "E_NOT_ARROW")
	require.FileExists(t, filepath.Join(s.Dir(DirFailed), c.Claimed))
	errText, err = os.ReadFile(filepath.Join(s.Dir(DirFailed), stem(b.Claimed)+ErrorSuffix))
	require.NoError(t, err)
	require.Contains(t, string(errText), b.Claimed+": row 1 (rollout_id \"mixed-000001\"): column logprobs: E_LOGPROB_INF")
	r, err := OpenReader(filepath.Join(s.Dir(DirFailed), stem(b.Claimed)+RejectedSuffix), ReadOptions{})
	require.NoError(t, err)
	require.True(t, r.Next())
	require.Equal(t, "mixed-000001", r.Rollout().ID)
	require.Equal(t, ELogprobInf, r.Problems()[0].Code, "the rejected row is kept unchanged")
	require.False(t, r.Next())
	require.NoError(t, r.Close())

	counts, err := s.Counts()
	require.NoError(t, err)
	require.Equal(t, Counts{Incoming: 0, Processing: 0, Done: 2, Failed: 1}, counts)
	tot := s.Journal().Totals()
	require.Equal(t, int64(5), tot.RolloutsAccepted)
	require.Equal(t, int64(1), tot.RolloutsRejected)
	require.Equal(t, int64(1), tot.FilesQuarantined)
	require.FileExists(t, filepath.Join(s.Dir(DirIncoming), "d.arrow.tmp"))
}

func TestSpoolExactlyOncePerRolloutID(t *testing.T) {
	s := openTestSpool(t, t.TempDir())
	rs := synthRollouts("r", 4)
	drop(t, s, "a.arrow", rs)
	ingestAll(t, s)
	// The same file dropped again under the same name, and its rows mixed into another.
	drop(t, s, "a.arrow", rs)
	drop(t, s, "b.arrow", append(synthRollouts("new", 1), rs[2]))
	reps := ingestAll(t, s)
	require.Len(t, reps, 2)
	for _, rep := range reps {
		switch rep.Name {
		case "a.arrow":
			require.Equal(t, 0, rep.Accepted)
			require.Equal(t, 4, rep.Rejected)
			require.Equal(t, OutcomeFailed, rep.Outcome, "a file with no surviving row goes to failed/")
			for _, p := range rep.Problems {
				require.Equal(t, EDupRollout, p.Code)
			}
		case "b.arrow":
			require.Equal(t, 1, rep.Accepted)
			require.Equal(t, EDupRollout, rep.Problems[0].Code)
			require.Equal(t, "r-000002", rep.Problems[0].RolloutID)
		}
	}
	require.Equal(t, int64(5), s.Journal().Totals().RolloutsAccepted)
	// Both claims of a.arrow live side by side; nothing was overwritten.
	require.FileExists(t, filepath.Join(s.Dir(DirDone), "00000001-a.arrow"))
	require.FileExists(t, filepath.Join(s.Dir(DirFailed), "00000002-a.arrow"))
}

func TestSpoolRecover(t *testing.T) {
	root := t.TempDir()
	s := openTestSpool(t, root)
	drop(t, s, "claimed-only.arrow", synthRollouts("c", 2))
	drop(t, s, "decided.arrow", append(synthRollouts("d", 2), synthRollouts("c", 1)...)) // one duplicate row
	drop(t, s, "moved.arrow", synthRollouts("m", 2))
	drop(t, s, "vanished.arrow", synthRollouts("v", 1))
	names := []string{"claimed-only.arrow", "decided.arrow", "moved.arrow", "vanished.arrow"}

	// Crash points, one per file:
	// 1. claim journaled, rename not done.
	c1, err := s.Journal().Claim(names[0])
	require.NoError(t, err)
	// 2. decided (journaled) but not finished; its duplicate row is c-000000 from file 1,
	//    which is not yet accepted, so it is accepted here.
	c2, err := s.Claim(names[1])
	require.NoError(t, err)
	rep2, err := s.Process(t.Context(), c2)
	require.NoError(t, err)
	require.Equal(t, 3, rep2.Accepted)
	// 3. moved to done/ but the finish entry never written.
	c3, err := s.Claim(names[2])
	require.NoError(t, err)
	_, err = s.Process(t.Context(), c3)
	require.NoError(t, err)
	require.NoError(t, os.Rename(filepath.Join(s.Dir(DirProcessing), c3.ClaimedName()), filepath.Join(s.Dir(DirDone), c3.ClaimedName())))
	// 4. claim journaled, then the file disappeared.
	_, err = s.Journal().Claim(names[3])
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(s.Dir(DirIncoming), names[3])))
	require.NoError(t, s.Close())

	s = openTestSpool(t, root)
	before := s.Journal().Totals()
	todo, err := s.Recover()
	require.NoError(t, err)
	require.Len(t, todo, 2)
	require.Equal(t, c1.Seq, todo[0].Seq)
	require.False(t, todo[0].Decided)
	require.Equal(t, c2.Seq, todo[1].Seq)
	require.True(t, todo[1].Decided)
	require.Equal(t, before.FilesDone+1, s.Journal().Totals().FilesDone, "the moved file's finish is journaled")
	require.Empty(t, s.Journal().Unfinished()[2:])

	for _, c := range todo {
		rep, err := s.Process(t.Context(), c)
		require.NoError(t, err)
		require.NoError(t, s.Finish(c, rep))
		if c.Seq == c1.Seq {
			// c-000000 was accepted from decided.arrow: the later-claimed file decided it
			// first, and a decision is never taken back.
			require.Equal(t, 1, rep.Accepted)
			require.Equal(t, EDupRollout, rep.Problems[0].Code)
		} else {
			require.Equal(t, 3, rep.Accepted, "replaying a decided file keeps its decisions")
		}
	}
	tot := s.Journal().Totals()
	require.Equal(t, int64(2+3+1), tot.RolloutsAccepted)
	require.Empty(t, s.Journal().Unfinished())
	counts, err := s.Counts()
	require.NoError(t, err)
	require.Equal(t, Counts{Done: 3}, counts)
}

func TestRenameNoReplace(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	require.NoError(t, os.WriteFile(a, []byte("a"), 0o644))
	require.NoError(t, os.WriteFile(b, []byte("b"), 0o644))
	require.ErrorIs(t, fsutil.RenameNoReplace(a, b), os.ErrExist)
	got, _ := os.ReadFile(b)
	require.Equal(t, "b", string(got))
	require.NoError(t, os.Remove(b))
	require.NoError(t, fsutil.RenameNoReplace(a, b))
	require.NoFileExists(t, a)
}

func TestIsRolloutFileName(t *testing.T) {
	for name, want := range map[string]bool{
		"x.arrow": true, "x.arrow.tmp": false, ".x.arrow": false, ".arrow": false, "x.feather": false,
		"x.rejected.arrow": true,
	} {
		require.Equal(t, want, IsRolloutFileName(name), name)
	}
	require.True(t, strings.HasSuffix("00000001-x"+RejectedSuffix, ".arrow"))
}

func TestSpoolRecoverRemovesStaleTemps(t *testing.T) {
	root := t.TempDir()
	s := openTestSpool(t, root)
	failed := s.Dir(DirFailed)
	for _, n := range []string{".00000001-x.error.tmp-123", "00000002-y.rejected.arrow.tmp"} {
		require.NoError(t, os.WriteFile(filepath.Join(failed, n), []byte("half"), 0o644))
	}
	keep := filepath.Join(failed, "00000003-z.error")
	require.NoError(t, os.WriteFile(keep, []byte("E_NOT_ARROW"), 0o644))
	_, err := s.Recover()
	require.NoError(t, err)
	ents, err := os.ReadDir(failed)
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.FileExists(t, keep)
}
