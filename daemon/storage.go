package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
)

// probeStorage finds what the data directory's file system offers the durable writes
// and logs it once. Where renameat2(RENAME_NOREPLACE) is refused, every no-replace
// rename (claims, checkpoint directories, credit publishes, done/ and failed/ moves)
// checks and then renames, which the data directory's lock makes safe.
func probeStorage(dir string, log zerolog.Logger) (fsutil.Features, error) {
	f, err := fsutil.Probe(dir)
	if err != nil {
		return f, err
	}
	ev := log.Info()
	if !f.RenameNoReplace || !f.Symlinks {
		ev = log.Warn()
	}
	ev = ev.Str("dir", dir).Str("fs_type", f.FSType).Bool("rename_noreplace", f.RenameNoReplace).
		Bool("hard_links", f.HardLinks).Bool("symlinks", f.Symlinks).Str("rename_mode", f.RenameMode())
	switch {
	case !f.Symlinks:
		ev.Msg("storage: the file system has no symlinks, so checkpoints/latest cannot be kept; the first checkpoint will fail")
	case !f.RenameNoReplace:
		ev.Msg("storage: the file system refuses RENAME_NOREPLACE; no-replace renames check, then rename, under the data directory's lock")
	default:
		ev.Msg("storage")
	}
	return f, nil
}

// tempName matches the temp entries of the durable writes: ".<name>.tmp-<n>"
// (fsutil.WriteFile, credit files, the journal's compaction, a new model directory),
// ".tmp-<...>" (checkpoint directories, teacher-cache entries, merged LoRA models),
// ".latest.tmp" (the checkpoints/latest link being replaced) and Probe's scratch
// directories. All are hidden, so no reader lists them as real files.
var tempName = regexp.MustCompile(`^\.(.+\.tmp-[0-9]+|tmp-.*|latest\.tmp|` + regexp.QuoteMeta(strings.TrimPrefix(fsutil.ProbePrefix, ".")) + `[0-9]+)$`)

// oldModelName matches the model directory InitModel(force) moved aside:
// ".<name>.old-<n>".
var oldModelName = regexp.MustCompile(`^\.(.+)\.old-[0-9]+$`)

// removeTemps removes what interrupted durable writes left in the directories the
// daemon owns, logging each decision. None of it is ever needed: every such write is
// redone from what is durable (the journal, the staged credit rows, the previous
// checkpoint), and until its rename the old file is the whole truth. incoming/ is
// left alone: collectors write their own "name.arrow.tmp" there while the daemon runs.
func removeTemps(cfg Config, log zerolog.Logger) error {
	spool := cfg.SpoolDir()
	flat := []string{cfg.DataDir, cfg.CheckpointDir(), cfg.OutputPath(), spool,
		filepath.Join(spool, rollout.DirProcessing), filepath.Join(spool, rollout.DirDone), filepath.Join(spool, rollout.DirFailed)}
	if dir, isDefault := cfg.ModelDir(); isDefault {
		flat = append(flat, dir)
	}
	// The state folder holds the journal, the skip log, the staged credit rows and the
	// default teacher cache. A teacher.cache_dir elsewhere may be shared with other
	// daemons, whose writes in progress must not be removed: it is left alone.
	deep := []string{filepath.Join(cfg.DataDir, "state")}
	seen := map[string]bool{}
	for _, d := range flat {
		if err := removeTempsIn(d, seen, false, log); err != nil {
			return err
		}
	}
	for _, d := range deep {
		if err := removeTempsIn(d, seen, true, log); err != nil {
			return err
		}
	}
	return nil
}

// removeTempsIn removes the temp entries of dir (and of its subdirectories when deep).
func removeTempsIn(dir string, seen map[string]bool, deep bool, log zerolog.Logger) error {
	if seen[dir] {
		return nil
	}
	seen[dir] = true
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove temp files: %w", err)
	}
	for _, e := range ents {
		n, p := e.Name(), filepath.Join(dir, e.Name())
		switch {
		case tempName.MatchString(n) || (filepath.Base(dir) == rollout.DirFailed && strings.HasSuffix(n, rollout.RejectedSuffix+".tmp")):
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove temp files: %w", err)
			}
			log.Info().Str("path", p).Bool("dir", e.IsDir()).Msg("removed the temp file of an interrupted write; the write is redone from what is durable")
		case e.IsDir() && oldModelName.MatchString(n):
			if err := restoreOrRemoveOld(dir, n, log); err != nil {
				return err
			}
		case deep && e.IsDir():
			if err := removeTempsIn(p, seen, true, log); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreOrRemoveOld finishes an interrupted replacement of a model directory: the
// old copy ".<name>.old-<n>" is removed when <name> is in place, and moved back when
// the crash came between moving it aside and renaming the new one in.
func restoreOrRemoveOld(dir, old string, log zerolog.Logger) error {
	name := oldModelName.FindStringSubmatch(old)[1]
	p, target := filepath.Join(dir, old), filepath.Join(dir, name)
	if _, err := os.Lstat(target); err == nil {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove replaced directory %s: %w", p, err)
		}
		log.Info().Str("path", p).Msg("removed a directory replaced by an interrupted write; its replacement is in place")
		return nil
	}
	if err := fsutil.RenameNoReplace(p, target); err != nil {
		return fmt.Errorf("restore %s: %w", target, err)
	}
	log.Warn().Str("path", target).Msg("restored a directory whose replacement was interrupted before it was renamed in")
	return nil
}

// storageGauge is hindsight_storage_feature: 1 where the data directory's file system
// offers a feature, 0 where the daemon works around its absence.
func storageGauge(f fsutil.Features) prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "hindsight_storage_feature",
		Help: "What the data directory's file system offers (1) or lacks (0), probed at start: " +
			"rename_noreplace (without it renames check, then rename), hard_links, symlinks."},
		[]string{"feature", "fs_type"})
	one := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	g.WithLabelValues("rename_noreplace", f.FSType).Set(one(f.RenameNoReplace))
	g.WithLabelValues("hard_links", f.FSType).Set(one(f.HardLinks))
	g.WithLabelValues("symlinks", f.FSType).Set(one(f.Symlinks))
	return g
}
