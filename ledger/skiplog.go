package ledger

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// skipLog is the durable list of rollouts skipped for policy lag: an fsynced line
// per rollout_id. A torn last line (a crash mid-write) is ignored: that rollout is
// taken again and skipped again.
type skipLog struct {
	f   *os.File
	ids map[string]bool
}

// openSkipLog opens the skip log at path, first rewriting it (atomically) without
// the ids that keep does not hold, when there are such: the skips of finished files
// are never needed again.
func openSkipLog(path string, keep map[string]bool) (*skipLog, error) {
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("open skip log: %w", err)
	}
	l := &skipLog{ids: map[string]bool{}}
	if b, err := os.ReadFile(path); err == nil {
		s := string(b)
		i := strings.LastIndexByte(s, '\n')
		s = s[:i+1]
		if len(s) < len(b) { // a torn last line: cut it off before appending
			if err := os.Truncate(path, int64(len(s))); err != nil {
				return nil, fmt.Errorf("open skip log: %w", err)
			}
		}
		var kept strings.Builder
		dropped := false
		for _, id := range strings.Split(s, "\n") {
			switch {
			case id == "":
			case keep[id]:
				l.ids[id] = true
				kept.WriteString(id + "\n")
			default:
				dropped = true
			}
		}
		if dropped {
			if err := fsutil.WriteFileBytes(path, []byte(kept.String()), 0o644); err != nil {
				return nil, fmt.Errorf("open skip log: %w", err)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("open skip log: %w", err)
	}
	f, err := fsutil.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open skip log: %w", err)
	}
	l.f = f
	return l, nil
}

// add appends id durably. A failed write (a full disk) is cut off again, so a retry
// never leaves a torn line in the middle of the log.
func (l *skipLog) add(id string) error {
	off, err := l.f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("skip log: %w", err)
	}
	w := bufio.NewWriter(l.f)
	w.WriteString(id + "\n")
	err = w.Flush()
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		if terr := l.f.Truncate(off); terr != nil {
			return fmt.Errorf("skip log: %w (and cut off the torn line: %v)", err, terr)
		}
		return fmt.Errorf("skip log: %w", err)
	}
	l.ids[id] = true
	return nil
}

func (l *skipLog) close() error { return l.f.Close() }
