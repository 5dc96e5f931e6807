package ledger

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/internal/wlog"
)

// skipLog is the durable list of rollouts skipped for policy lag: a line log
// (internal/wlog) of one rollout_id per line. A torn last line (a crash mid-write) is
// cut off: that rollout is taken again and skipped again. A line that is not an id
// with whole lines after it refuses the log (nothing is dropped).
type skipLog struct {
	log *wlog.Log
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
	var kept [][]byte
	dropped := false
	log, err := wlog.Open(path, wlog.Options{Replay: func(line []byte) error {
		id, err := decodeSkip(line)
		if err != nil {
			return wlog.Corrupt(err)
		}
		if keep[id] {
			l.ids[id] = true
			kept = append(kept, line)
		} else {
			dropped = true
		}
		return nil
	}})
	if err != nil {
		return nil, fmt.Errorf("open skip log: %w", err)
	}
	if dropped {
		err := log.Rewrite(func(w io.Writer) error {
			for _, line := range kept {
				if _, err := w.Write(append(line, '\n')); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			log.Close()
			return nil, fmt.Errorf("open skip log: %w", err)
		}
	}
	l.log = log
	return l, nil
}

// add appends id durably. A failed append (a full disk) is cut off again, so a retry
// never leaves a torn line in the middle of the log.
func (l *skipLog) add(id string) error {
	if err := l.log.Append(encodeSkip(id)); err != nil {
		return fmt.Errorf("skip log: %w", err)
	}
	l.ids[id] = true
	return nil
}

func (l *skipLog) close() error { return l.log.Close() }

// encodeSkip is id's line: the id itself, or, when it holds a control character
// (a newline would split it), is not valid UTF-8 or starts with a quote, the id
// quoted as Go quotes strings, which round-trips every byte.
func encodeSkip(id string) []byte {
	if id != "" && id[0] != '"' && plain(id) {
		return []byte(id)
	}
	return []byte(strconv.Quote(id))
}

// decodeSkip is the id of a line of the skip log, or why the line is not one.
func decodeSkip(line []byte) (string, error) {
	switch {
	case len(line) == 0:
		return "", errors.New("an empty line is not a rollout_id")
	case line[0] == '"':
		id, err := strconv.Unquote(string(line))
		if err != nil {
			return "", fmt.Errorf("a quoted rollout_id that does not unquote: %w", err)
		}
		return id, nil
	case !plain(string(line)):
		return "", errors.New("a control character or invalid UTF-8 outside quotes: not a rollout_id the skip log writes")
	}
	return string(line), nil
}

// plain reports whether s is valid UTF-8 without control characters.
func plain(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}
