package rollout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// ErrVanished is returned by Claim when the file left incoming/ before it could be
// renamed (a collector removed it, or another process took it). The claim is closed in
// the journal with OutcomeVanished.
var ErrVanished = errors.New("file vanished from incoming before it was claimed")

// Claim takes the incoming file name: it journals the claim, then renames the file
// into processing/ under its sequence number, never overwriting a file there. A crash
// between the two steps is finished by Recover.
func (s *Spool) Claim(name string) (*ClaimState, error) {
	if !IsRolloutFileName(name) || filepath.Base(name) != name {
		return nil, fmt.Errorf("claim %q: not a rollout file name", name)
	}
	c, err := s.journal.Claim(name)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", name, err)
	}
	if err := s.moveIn(c); err != nil {
		return nil, err
	}
	s.log.Debug().Uint64("seq", c.Seq).Str("file", name).Msg("claimed")
	return c, nil
}

// moveIn renames a journaled claim's file from incoming/ to processing/.
func (s *Spool) moveIn(c *ClaimState) error {
	src := filepath.Join(s.Dir(DirIncoming), c.Name)
	dst := filepath.Join(s.Dir(DirProcessing), c.ClaimedName())
	err := fsutil.RenameNoReplace(src, dst)
	if errors.Is(err, fs.ErrNotExist) {
		if ferr := s.journal.Finish(c.Seq, OutcomeVanished, "", ""); ferr != nil {
			return fmt.Errorf("claim %s: %w", c.Name, ferr)
		}
		return fmt.Errorf("claim %s: %w", c.Name, ErrVanished)
	}
	if err != nil {
		return fmt.Errorf("claim %s: %w", c.Name, err)
	}
	return nil
}

// Recover brings the spool back to a consistent state after a crash and returns the
// claims still in processing/, in claim order, for the caller to Process and Finish.
// For each unfinished claim in the journal:
//   - the file is in processing/: returned (decided or not);
//   - it is already in done/ or failed/ (crash after the move, before the journal
//     entry): the finish is journaled now;
//   - it is still in incoming/ (crash after the claim entry, before the rename): the
//     rename is redone and the claim returned;
//   - it is nowhere: the claim is closed as vanished.
//
// Files in processing/ that no claim names are left alone and logged: the spool never
// deletes or guesses.
func (s *Spool) Recover() ([]*ClaimState, error) {
	var todo []*ClaimState
	known := map[string]bool{}
	for _, c := range s.journal.Unfinished() {
		name := c.ClaimedName()
		known[name] = true
		switch {
		case exists(filepath.Join(s.Dir(DirProcessing), name)):
			todo = append(todo, c)
		case exists(filepath.Join(s.Dir(DirDone), name)):
			if err := s.journal.Finish(c.Seq, OutcomeDone, "", ""); err != nil {
				return nil, fmt.Errorf("recover spool: %w", err)
			}
		case exists(filepath.Join(s.Dir(DirFailed), name)):
			outcome := OutcomeFailed
			if !c.Decided {
				outcome = OutcomeQuarantined
			}
			if err := s.journal.Finish(c.Seq, outcome, "", ""); err != nil {
				return nil, fmt.Errorf("recover spool: %w", err)
			}
		case exists(filepath.Join(s.Dir(DirIncoming), c.Name)):
			if err := s.moveIn(c); err != nil {
				if errors.Is(err, ErrVanished) {
					continue
				}
				return nil, fmt.Errorf("recover spool: %w", err)
			}
			todo = append(todo, c)
		default:
			s.log.Warn().Uint64("seq", c.Seq).Str("file", c.Name).Msg("claimed file is gone from the spool; closing its claim as vanished")
			if err := s.journal.Finish(c.Seq, OutcomeVanished, "", ""); err != nil {
				return nil, fmt.Errorf("recover spool: %w", err)
			}
		}
	}
	if err := s.removeStaleTemps(); err != nil {
		return nil, fmt.Errorf("recover spool: %w", err)
	}
	ents, err := os.ReadDir(s.Dir(DirProcessing))
	if err != nil {
		return nil, fmt.Errorf("recover spool: %w", err)
	}
	for _, e := range ents {
		if !known[e.Name()] && !isTemp(e.Name()) {
			s.log.Warn().Str("file", e.Name()).Msg("file in processing/ is not in the journal; left alone")
		}
	}
	return todo, nil
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func isTemp(name string) bool { return filepath.Ext(name) == ".tmp" }

// removeStaleTemps deletes the spool's own temp files that a crash left in failed/:
// the hidden ".name.tmp-*" of durable writes and "*.rejected.arrow.tmp". They never
// hold anything that is not rewritten when the claim is processed again.
func (s *Spool) removeStaleTemps() error {
	dir := s.Dir(DirFailed)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		n := e.Name()
		stale := (strings.HasPrefix(n, ".") && strings.Contains(n, ".tmp-")) || strings.HasSuffix(n, RejectedSuffix+".tmp")
		if !stale || !e.Type().IsRegular() {
			continue
		}
		if err := os.Remove(filepath.Join(dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		s.log.Debug().Str("file", n).Msg("removed a temp file left by a crash")
	}
	return nil
}
