package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Checkpoint file names inside a step directory. The directory is a model directory
// (docs/models.md "Model directories") that transformers, vLLM and SGLang load as is: its top
// level holds one weights file, the policy's. The trainer's other tensors live in
// TrainerDirName, where no server looks (docs/training.md "Checkpoint layout").
const (
	ManifestFileName     = "manifest.json"      // written last: sizes and SHA-256 of every other file
	TrainerStateFileName = "trainer_state.json" // TrainerState; a .json, which no server loads as weights
	LatestLinkName       = "latest"             // symlink to the newest complete step directory
	// TrainerDirName is the subdirectory of a step directory for training state that
	// is not the policy: servers list only the top level's *.safetensors.
	TrainerDirName    = "trainer"
	OptimizerFileName = TrainerDirName + "/optimizer.safetensors"
	TeacherFileName   = TrainerDirName + "/teacher.safetensors" // frozen or EMA teacher weights, when kept
	// AdapterDirName is the subdirectory of a LoRA run's step directory holding the
	// adapter as PEFT saves one (docs/training.md "LoRA"): vLLM's --lora-modules and PEFT's
	// from_pretrained load it; servers of the root do not look there.
	AdapterDirName        = "adapter"
	AdapterModelFileName  = AdapterDirName + "/adapter_model.safetensors"
	AdapterConfigFileName = AdapterDirName + "/adapter_config.json"
)

// TrainerFile returns the path of trainer file name (OptimizerFileName,
// TeacherFileName) in step directory dir. Checkpoints written before the trainer/
// subdirectory hold these files at the top level; when only that old file exists its
// path is returned, so old checkpoints restore.
func TrainerFile(dir, name string) string {
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	old := filepath.Join(dir, filepath.Base(name))
	if _, err := os.Stat(old); err == nil && old != p {
		return old
	}
	return p
}

// Checkpoint is what one checkpoint holds.
type Contents struct {
	Step int64
	// Files are written as they are: the model directory's non-weight files
	// (ModelFiles: config.json, the tokenizer, chat template and generation files, …).
	Files map[string][]byte
	// Tensors maps a safetensors file name (model.safetensors, OptimizerFileName,
	// TeacherFileName) to its tensors. A name is a file of the step directory or of
	// its TrainerDirName subdirectory.
	Tensors map[string][]safetensors.NamedTensor
	State   TrainerState
}

// TrainerState is trainer_state.json: everything beside the tensors that an exact
// resume needs.
type TrainerState struct {
	Step        int64     `json:"step"`
	CreatedAt   time.Time `json:"created_at"`
	CodeVersion string    `json:"code_version"`
	// Config is the effective daemon configuration, as YAML.
	Config string `json:"config"`
	// Trained lists the rollout_ids whose gradient is in these weights and whose file
	// had not finished when the checkpoint was written: the source of truth for
	// "trained" (docs/design.md "Rollout states") while a file is in processing/. Once a
	// file is finished the journal says so, and its ids leave the list, which so stays
	// as short as the spool's unfinished work.
	Trained []string `json:"trained"`
	// TrainedTotal counts every rollout whose gradient is in these weights, over the
	// run's life. 0 in checkpoints of older versions: there Trained lists them all.
	TrainedTotal int64 `json:"trained_total,omitempty"`
	// Baselines, RNG and Extra are owned by credit/ and xla/; stored as they come.
	Baselines json.RawMessage            `json:"baselines,omitempty"`
	RNG       json.RawMessage            `json:"rng,omitempty"`
	Extra     map[string]json.RawMessage `json:"extra,omitempty"`
}

// Manifest is manifest.json. A step directory is valid only when its manifest parses
// and every file it lists has the recorded size and hash.
type Manifest struct {
	Step  int64                    `json:"step"`
	Files map[string]ManifestEntry `json:"files"`
}

// ManifestEntry describes one file of a checkpoint.
type ManifestEntry struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// StepDirName is the directory name of a step: step-000123.
func StepDirName(step int64) string { return fmt.Sprintf("step-%06d", step) }

var stepDirRe = regexp.MustCompile(`^step-(\d{6,})$`)

// WriteCheckpoint writes ck under root/step-NNNNNN: every file into a temp directory,
// fsynced, the manifest last, then the directory renamed into place and fsynced, then
// the latest link moved to it, then all but the newest keep step directories removed.
// A crash at any point leaves either no new directory or a complete one; the latest
// link always names a complete one. keep < 1 keeps every checkpoint.
func Write(root string, ck *Contents, keep int) (string, error) {
	if err := fsutil.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	name := StepDirName(ck.Step)
	dir := filepath.Join(root, name)
	if _, err := os.Stat(dir); err == nil {
		return "", fmt.Errorf("write checkpoint %s: already exists", dir)
	}
	tmp, err := os.MkdirTemp(root, ".tmp-"+name+"-*")
	if err != nil {
		return "", fmt.Errorf("write checkpoint: %w", err)
	}
	if err := writeCheckpointFiles(tmp, ck); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	if err := fsutil.SyncDir(tmp); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	if err := fsutil.RenameNoReplace(tmp, dir); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	if err := pointLatest(root, name); err != nil {
		return dir, fmt.Errorf("write checkpoint %s: %w", name, err)
	}
	if keep > 0 {
		if err := pruneCheckpoints(root, keep); err != nil {
			return dir, fmt.Errorf("write checkpoint %s: %w", name, err)
		}
	}
	return dir, nil
}

// writeCheckpointFiles writes every file of ck into dir, the manifest last.
func writeCheckpointFiles(dir string, ck *Contents) error {
	st := ck.State
	st.Step = ck.Step
	if st.CreatedAt.IsZero() {
		st.CreatedAt = time.Now().UTC()
	}
	if st.Trained == nil {
		st.Trained = []string{}
	}
	stateJSON, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	files := map[string][]byte{TrainerStateFileName: append(stateJSON, '\n')}
	for n, b := range ck.Files {
		files[n] = b
	}
	for n := range ck.Tensors {
		if _, dup := files[n]; dup {
			return fmt.Errorf("file %s given both as bytes and as tensors", n)
		}
	}
	subdirs, err := makeSubdirs(dir, files, ck.Tensors)
	if err != nil {
		return err
	}
	for n, b := range files {
		if err := fsutil.WriteFileBytes(filepath.Join(dir, n), b, 0o644); err != nil {
			return err
		}
	}
	for n, ts := range ck.Tensors {
		if err := safetensors.Write(filepath.Join(dir, n), ts, map[string]string{"format": "pt"}); err != nil {
			return err
		}
	}
	for _, sd := range subdirs {
		if err := fsutil.SyncDir(filepath.Join(dir, sd)); err != nil {
			return err
		}
	}
	m := Manifest{Step: ck.Step, Files: map[string]ManifestEntry{}}
	for _, sub := range append([]string{""}, subdirs...) {
		ents, err := os.ReadDir(filepath.Join(dir, sub))
		if err != nil {
			return err
		}
		for _, e := range ents {
			n := path.Join(sub, e.Name())
			if n == ManifestFileName || e.Name()[0] == '.' || e.IsDir() {
				continue
			}
			entry, err := hashFile(filepath.Join(dir, n))
			if err != nil {
				return err
			}
			m.Files[n] = entry
		}
	}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileBytes(filepath.Join(dir, ManifestFileName), append(mb, '\n'), 0o644)
}

// checkFileName accepts a plain file name of the step directory, or one inside its
// TrainerDirName or AdapterDirName subdirectory ("trainer/optimizer.safetensors").
func checkFileName(n string) error {
	base := n
	if dir, rest, ok := strings.Cut(n, "/"); ok && (dir == TrainerDirName || dir == AdapterDirName) {
		base = rest
	}
	if base == "" || base != path.Base(base) || strings.ContainsRune(base, filepath.Separator) ||
		base[0] == '.' || n == ManifestFileName || n == TrainerDirName || n == AdapterDirName {
		return fmt.Errorf("bad checkpoint file name %q", n)
	}
	return nil
}

// makeSubdirs checks every file name of a checkpoint and makes the subdirectories
// they need, returning those.
func makeSubdirs(dir string, files map[string][]byte, tensors map[string][]safetensors.NamedTensor) ([]string, error) {
	names := make([]string, 0, len(files)+len(tensors))
	for n := range files {
		names = append(names, n)
	}
	for n := range tensors {
		names = append(names, n)
	}
	var subdirs []string
	for _, n := range names {
		if err := checkFileName(n); err != nil {
			return nil, err
		}
		if sd := path.Dir(n); sd != "." && !slices.Contains(subdirs, sd) {
			if err := os.Mkdir(filepath.Join(dir, sd), 0o755); err != nil {
				return nil, err
			}
			subdirs = append(subdirs, sd)
		}
	}
	return subdirs, nil
}

func hashFile(path string) (ManifestEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return ManifestEntry{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return ManifestEntry{}, fmt.Errorf("hash %s: %w", path, err)
	}
	return ManifestEntry{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// pointLatest atomically points root/latest at the step directory name: a new
// symlink beside it renamed over the old one.
func pointLatest(root, name string) error {
	tmp := filepath.Join(root, ".latest.tmp")
	os.Remove(tmp)
	if err := os.Symlink(name, tmp); err != nil {
		return fmt.Errorf("point latest: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(root, LatestLinkName)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("point latest: %w", err)
	}
	return fsutil.SyncDir(root)
}

// Steps lists the step directories under root, oldest first. Temp directories of
// interrupted writes are not listed.
func Steps(root string) ([]int64, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var steps []int64
	for _, e := range ents {
		if m := stepDirRe.FindStringSubmatch(e.Name()); m != nil && e.IsDir() {
			n, err := strconv.ParseInt(m[1], 10, 64)
			if err == nil {
				steps = append(steps, n)
			}
		}
	}
	sort.Slice(steps, func(a, b int) bool { return steps[a] < steps[b] })
	return steps, nil
}

// pruneCheckpoints removes all but the newest keep step directories, and temp
// directories of interrupted writes.
func pruneCheckpoints(root string, keep int) error {
	steps, err := Steps(root)
	if err != nil {
		return err
	}
	for i := 0; i < len(steps)-keep; i++ {
		if err := os.RemoveAll(filepath.Join(root, StepDirName(steps[i]))); err != nil {
			return fmt.Errorf("prune checkpoint: %w", err)
		}
	}
	return removeStaleTemps(root)
}

func removeStaleTemps(root string) error {
	stale, err := filepath.Glob(filepath.Join(root, ".tmp-step-*"))
	if err != nil {
		return err
	}
	for _, d := range stale {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("remove interrupted checkpoint %s: %w", d, err)
		}
	}
	return nil
}

// VerifyCheckpoint checks a step directory against its manifest and returns its
// trainer state. Any missing, resized or altered file, or a missing manifest (an
// interrupted write), is an error naming the file.
func Verify(dir string) (*TrainerState, error) {
	mb, err := os.ReadFile(filepath.Join(dir, ManifestFileName))
	if err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %s: %w", dir, ManifestFileName, err)
	}
	if _, ok := m.Files[TrainerStateFileName]; !ok {
		return nil, fmt.Errorf("verify checkpoint %s: manifest lists no %s", dir, TrainerStateFileName)
	}
	names := make([]string, 0, len(m.Files))
	for n := range m.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := checkFileName(n); err != nil {
			return nil, fmt.Errorf("verify checkpoint %s: manifest: %w", dir, err)
		}
		got, err := hashFile(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("verify checkpoint %s: %w", dir, err)
		}
		if want := m.Files[n]; got != want {
			return nil, fmt.Errorf("verify checkpoint %s: %s has %d bytes with sha256 %.12s…, the manifest says %d bytes with %.12s…",
				dir, n, got.Size, got.SHA256, want.Size, want.SHA256)
		}
	}
	sb, err := os.ReadFile(filepath.Join(dir, TrainerStateFileName))
	if err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %w", dir, err)
	}
	var st TrainerState
	if err := json.Unmarshal(sb, &st); err != nil {
		return nil, fmt.Errorf("verify checkpoint %s: %s: %w", dir, TrainerStateFileName, err)
	}
	if st.Step != m.Step {
		return nil, fmt.Errorf("verify checkpoint %s: trainer state is step %d, manifest step %d", dir, st.Step, m.Step)
	}
	return &st, nil
}

// LatestCheckpoint returns the newest valid checkpoint under root: the newest step
// directory that verifies, with an error logged for each newer one that does not.
// The latest link is repaired when it names another (a crash between the rename of
// a new step directory and the move of the link leaves it one step behind). It
// returns "" and a nil state when there is no checkpoint yet.
func Latest(root string, log zerolog.Logger) (string, *TrainerState, error) {
	if err := removeStaleTemps(root); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", nil, err
	}
	steps, err := Steps(root)
	if err != nil {
		return "", nil, err
	}
	for i := len(steps) - 1; i >= 0; i-- {
		name := StepDirName(steps[i])
		d := filepath.Join(root, name)
		st, err := Verify(d)
		if err != nil {
			log.Error().Err(err).Str("checkpoint", d).Msg("checkpoint does not verify; falling back to an older one")
			continue
		}
		if target, _ := os.Readlink(filepath.Join(root, LatestLinkName)); target != name {
			if err := pointLatest(root, name); err != nil {
				return "", nil, err
			}
		}
		return d, st, nil
	}
	if len(steps) > 0 {
		return "", nil, fmt.Errorf("load checkpoint: none of the %d checkpoints under %s verifies", len(steps), root)
	}
	return "", nil, nil
}
