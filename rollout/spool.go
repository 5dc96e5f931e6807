package rollout

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Spool folders under the spool root.
const (
	DirIncoming   = "incoming"
	DirProcessing = "processing"
	DirDone       = "done"
	DirFailed     = "failed"
)

// Spool is the on-disk backlog of rollout files: collectors drop x.arrow into
// incoming/ (writing x.arrow.tmp and renaming it), the spool claims each file by an
// atomic rename into processing/ under a journal sequence number, decides every row,
// and moves the file to done/ or failed/.
//
// Two goroutines drive a Spool in the daemon: the ingest goroutine claims and
// processes files, sequentially, in claim order; the device goroutine finishes
// trained files (Finish, and Journal().MaybeCompact after it) through the ledger.
// That is safe because Finish moves only its own claim's file, which ingest no longer
// touches once the file is decided, and every journal update holds the journal's
// mutex. Counts and the journal's totals may be read from any goroutine.
type Spool struct {
	root    string
	journal *Journal
	opts    ReadOptions
	log     zerolog.Logger
}

// OpenSpool creates the spool folders under root if needed and opens the journal at
// journalPath.
func OpenSpool(root, journalPath string, opts ReadOptions, log zerolog.Logger) (*Spool, error) {
	for _, d := range []string{DirIncoming, DirProcessing, DirDone, DirFailed} {
		if err := fsutil.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("create spool: %w", err)
		}
	}
	if err := fsutil.MkdirAll(filepath.Dir(journalPath), 0o755); err != nil {
		return nil, fmt.Errorf("create journal dir: %w", err)
	}
	j, err := OpenJournal(journalPath)
	if err != nil {
		return nil, err
	}
	return &Spool{root: root, journal: j, opts: opts, log: log.With().Str("component", "spool").Logger()}, nil
}

// Root returns the spool's root folder.
func (s *Spool) Root() string { return s.root }

// Dir returns the path of one of the spool's folders (DirIncoming, …).
func (s *Spool) Dir(name string) string { return filepath.Join(s.root, name) }

// Journal returns the spool's journal.
func (s *Spool) Journal() *Journal { return s.journal }

// Close closes the journal.
func (s *Spool) Close() error { return s.journal.Close() }

// IsRolloutFileName reports whether a name in incoming/ is a finished rollout file:
// it ends in ".arrow" and is not hidden. Collectors' "x.arrow.tmp" files are ignored.
func IsRolloutFileName(name string) bool {
	return strings.HasSuffix(name, ".arrow") && !strings.HasPrefix(name, ".") && len(name) > len(".arrow")
}

// Pending lists the rollout files waiting in incoming/, oldest first (by modification
// time, then name).
func (s *Spool) Pending() ([]string, error) {
	ents, err := os.ReadDir(s.Dir(DirIncoming))
	if err != nil {
		return nil, fmt.Errorf("list incoming: %w", err)
	}
	type item struct {
		name string
		mod  int64
	}
	var items []item
	for _, e := range ents {
		if !e.Type().IsRegular() || !IsRolloutFileName(e.Name()) {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("list incoming: %w", err)
		}
		items = append(items, item{e.Name(), info.ModTime().UnixNano()})
	}
	sort.Slice(items, func(a, b int) bool {
		if items[a].mod != items[b].mod {
			return items[a].mod < items[b].mod
		}
		return items[a].name < items[b].name
	})
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = it.name
	}
	return names, nil
}

// Counts is the number of rollout files in each spool folder.
type Counts struct {
	Incoming, Processing, Done, Failed int64
}

var claimedRe = regexp.MustCompile(`^\d{8}-.+\.arrow$`)

// Counts counts the rollout files in each folder. In failed/ only the quarantined or
// failed input files count, not their .error and .rejected.arrow companions.
func (s *Spool) Counts() (Counts, error) {
	var c Counts
	count := func(dir string, keep func(string) bool) (int64, error) {
		ents, err := os.ReadDir(s.Dir(dir))
		if err != nil {
			return 0, fmt.Errorf("count %s: %w", dir, err)
		}
		var n int64
		for _, e := range ents {
			if e.Type().IsRegular() && keep(e.Name()) {
				n++
			}
		}
		return n, nil
	}
	claimed := func(n string) bool { return claimedRe.MatchString(n) && !strings.HasSuffix(n, RejectedSuffix) }
	var err error
	if c.Incoming, err = count(DirIncoming, IsRolloutFileName); err != nil {
		return c, err
	}
	if c.Processing, err = count(DirProcessing, claimed); err != nil {
		return c, err
	}
	if c.Done, err = count(DirDone, claimed); err != nil {
		return c, err
	}
	if c.Failed, err = count(DirFailed, claimed); err != nil {
		return c, err
	}
	return c, nil
}

// RejectedSuffix and ErrorSuffix name the companions of a claimed file in failed/:
// "00000007-x.rejected.arrow" holds its rejected rows as they were, and
// "00000007-x.error" one line per problem.
const (
	RejectedSuffix = ".rejected.arrow"
	ErrorSuffix    = ".error"
)

func stem(claimed string) string { return strings.TrimSuffix(claimed, ".arrow") }
