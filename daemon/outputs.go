package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
)

// Credit rows of a trained rollout are staged, one small Arrow file per rollout, in
// <data>/state/credit/<claimed>/<row>.arrow, and fsynced before the checkpoint that
// lists the rollout. A file is published (<output_dir>/<claimed>.credit.arrow) only
// once a durable checkpoint lists every accepted rollout of it; then it moves to
// done/ and its staging folder is removed. Publishing never replaces a file, so a
// crash between publishing and finishing cannot publish twice.

func (dv *device) stagedPath(job *fileJob, row int) string {
	return filepath.Join(dv.d.cfg.StagingDir(), strings.TrimSuffix(job.rep.Claimed, ".arrow"), fmt.Sprintf("%06d.arrow", row))
}

// creditPath is where the credit file of a claimed input file is published.
func (c *Config) creditPath(claimed string) string {
	return filepath.Join(c.OutputPath(), strings.TrimSuffix(claimed, ".arrow")+data.CreditSuffix)
}

// tryFinish publishes f's credit file and finishes it in the spool once every
// accepted rollout of it is durable.
func (dv *device) tryFinish(f *fileProgress) error {
	if !f.ended || f.durable < f.job.rep.Accepted {
		return nil
	}
	d := dv.d
	rep := f.job.rep
	stage := filepath.Join(d.cfg.StagingDir(), strings.TrimSuffix(rep.Claimed, ".arrow"))
	var rows []data.CreditRow
	ents, err := os.ReadDir(stage)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("publish %s: %w", rep.Claimed, err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".arrow") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		rs, err := data.ReadCreditFile(filepath.Join(stage, n))
		if err != nil {
			return fmt.Errorf("publish %s: %w", rep.Claimed, err)
		}
		rows = append(rows, rs...)
	}
	out := d.cfg.creditPath(rep.Claimed)
	var published bool
	err = d.retryDiskFull(dv.work, "publish credit file", out, func() error {
		var err error
		published, err = data.PublishCreditFile(out, rows)
		return err
	})
	if err != nil {
		return err
	}
	if !published {
		dv.log.Info().Str("file", rep.Claimed).Str("credit_file", out).Msg("credit file already published before a restart")
	}
	if err := d.finish(dv.work, f.job.claim, rep); err != nil {
		return err
	}
	if err := os.RemoveAll(stage); err != nil {
		dv.log.Warn().Err(err).Str("dir", stage).Msg("remove staged credit rows")
	}
	delete(dv.open, f.job.claim.Seq)
	ids := map[string]bool{}
	addAccepted(ids, f.job.claim)
	dv.tr.ForgetTrained(func(id string) bool { return ids[id] })
	d.fileFinished(rep, len(rows), out)
	return nil
}

func (dv *device) sortedOpen() []*fileProgress {
	out := make([]*fileProgress, 0, len(dv.open))
	for _, f := range dv.open {
		out = append(out, f)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].job.claim.Seq < out[b].job.claim.Seq })
	return out
}

// removeStaleStaging removes staging folders of files that are finished (a crash
// between finishing a file and removing its folder leaves one).
func removeStaleStaging(dir string, unfinished []*rollout.ClaimState) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list staged credit rows: %w", err)
	}
	keep := map[string]bool{}
	for _, c := range unfinished {
		keep[strings.TrimSuffix(c.ClaimedName(), ".arrow")] = true
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("remove staged credit rows: %w", err)
			}
		}
	}
	return nil
}

// unfinishedIDs returns the accepted rollout_ids of the files the journal has not
// finished.
func unfinishedIDs(j *rollout.Journal) map[string]bool {
	ids := map[string]bool{}
	for _, c := range j.Unfinished() {
		addAccepted(ids, c)
	}
	return ids
}

// addAccepted adds to ids the rollout_ids that claim c accepted.
func addAccepted(ids map[string]bool, c *rollout.ClaimState) {
	for _, r := range c.Decisions {
		if r.Accepted {
			ids[r.ID] = true
		}
	}
}

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
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
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
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
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

func (l *skipLog) close() { l.f.Close() }
