package ledger

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/rollout"
)

// CreditPath is where the credit file of claimed input file claimed is published.
func CreditPath(outputDir, claimed string) string {
	return filepath.Join(outputDir, strings.TrimSuffix(claimed, ".arrow")+creditfile.Suffix)
}

// tryFinish publishes p's credit file and finishes it in the spool once every
// accepted rollout of it is trained. Each part is idempotent, so a crash anywhere
// in it replays to the same end: publishing never replaces a published file, the
// spool's Finish completes a half-done finish, and a leftover staging folder is
// removed at the next Open.
func (l *Ledger) tryFinish(ctx context.Context, p *progress) (*Finished, error) {
	rep := p.file.Report
	if !p.ended || p.durable < rep.Accepted {
		return nil, nil
	}
	stage := l.stageDir(rep.Claimed)
	rows, err := readStaged(stage)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", rep.Claimed, err)
	}
	out := CreditPath(l.o.OutputDir, rep.Claimed)
	var published bool
	err = l.o.Retry(ctx, "publish credit file", out, func() error {
		var err error
		published, err = creditfile.Publish(out, rows)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !published {
		l.log.Info().Str("file", rep.Claimed).Str("credit_file", out).Msg("credit file already published before a restart")
	}
	if err := l.o.Finish(ctx, p.file.Claim, rep); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(stage); err != nil {
		l.log.Warn().Err(err).Str("dir", stage).Msg("remove staged credit rows")
	}
	delete(l.open, p.file.Claim.Seq)
	l.forget(acceptedIDs(p.file.Claim))
	return &Finished{Report: rep, Rows: len(rows), CreditFile: out}, nil
}

// forget drops a finished file's rollouts from Trained (no later checkpoint needs
// them: the journal keeps a finished file from being read again); TrainedTotal
// still counts them.
func (l *Ledger) forget(ids []string) {
	drop := make(map[string]bool, len(ids))
	for _, id := range ids {
		drop[id] = true
	}
	l.trained = slices.DeleteFunc(l.trained, func(id string) bool { return drop[id] })
}

// readStaged reads the staged rows of one file, in row order.
func readStaged(stage string) ([]creditfile.Row, error) {
	ents, err := os.ReadDir(stage)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".arrow") && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var rows []creditfile.Row
	for _, n := range names {
		rs, err := creditfile.Read(filepath.Join(stage, n))
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, nil
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
