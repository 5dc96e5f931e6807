package data

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"golang.org/x/sys/unix"
)

// ModelDir is an opened Hugging Face model directory, the form of hindsight's
// initial models and checkpoints (docs/design.md, "Checkpoints"):
//
//	config.json                   ModelConfig (llama, mistral, qwen2, qwen3)
//	model.safetensors             the weights with transformers' names; or shards
//	  | model.safetensors.index.json + the files its weight_map names
//	tokenizer.json                the tokenizer (its bytes give the fingerprint)
//	tokenizer_config.json         for transformers' AutoTokenizer (not read here)
//	generation_config.json        bos/eos for generation (not read here)
//	chat_template.jinja, …        other tokenizer and chat files (not read here;
//	                              checkpoints copy them: checkpoint.ModelFiles)
//
// The weights hold exactly the tensors of Config.Tensors(), with those shapes, as
// F32, BF16 or F16. Close releases the weights' mappings.
type ModelDir struct {
	Dir       string
	Config    *ModelConfig
	Weights   *safetensors.Dir
	Tokenizer tokenizer.Tokenizer
}

// Names of the tokenizer and generation files of a model directory.
const (
	TokenizerFileName        = "tokenizer.json"
	TokenizerConfigFileName  = "tokenizer_config.json"
	GenerationConfigFileName = "generation_config.json"
)

// OpenModelDir opens the model directory dir: its config, weights and tokenizer,
// and checks that they fit together (CheckWeights; the config's vocab_size covers
// every tokenizer id). Errors name the file and the tensor or field.
func OpenModelDir(dir string) (*ModelDir, error) { return OpenModelDirWith(dir, nil) }

// OpenModelDirWith is OpenModelDir with tok, already loaded, as the tokenizer
// instead of parsing dir's tokenizer.json again (a second or more for a large
// vocabulary): dir's tokenizer.json must have tok's fingerprint. A nil tok parses
// the file.
func OpenModelDirWith(dir string, tok tokenizer.Tokenizer) (*ModelDir, error) {
	cfg, err := LoadModelConfig(filepath.Join(dir, ConfigFileName))
	if err != nil {
		return nil, fmt.Errorf("open model dir %s: %w", dir, err)
	}
	w, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open model dir %s: %w", dir, err)
	}
	if err := CheckWeights(cfg, w); err != nil {
		w.Close()
		return nil, fmt.Errorf("open model dir %s: %w", dir, err)
	}
	if tok == nil {
		tok, err = tokenizer.Load(filepath.Join(dir, TokenizerFileName))
	} else {
		err = checkTokenizerFile(filepath.Join(dir, TokenizerFileName), tok)
	}
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open model dir %s: %w", dir, err)
	}
	if n := tok.VocabSize(); cfg.VocabSize < n {
		w.Close()
		return nil, fmt.Errorf("open model dir %s: config.json: vocab_size: %d is smaller than the tokenizer's %d ids", dir, cfg.VocabSize, n)
	}
	return &ModelDir{Dir: dir, Config: cfg, Weights: w, Tokenizer: tok}, nil
}

// Close releases the weights.
func (m *ModelDir) Close() error { return m.Weights.Close() }

// maxWeightProblems caps how many problems CheckWeights lists.
const maxWeightProblems = 20

// CheckWeights checks that w holds exactly the tensors cfg.Tensors() names, with
// those shapes, each F32, BF16 or F16. Every problem names its tensor; a missing
// one also says which file should have held it. Rotary inv_freq buffers that old
// checkpoints carry (…rotary_emb.inv_freq) are ignored, as transformers ignores them.
func CheckWeights(cfg *ModelConfig, w *safetensors.Dir) error {
	var problems []string
	expected := cfg.TensorShapes()
	where := strings.Join(baseNames(w.Files()), ", ")
	for _, spec := range cfg.Tensors() {
		v, err := w.Tensor(spec.Name)
		if err != nil {
			problems = append(problems, fmt.Sprintf("tensor %s: missing (want shape %s; weights: %s)", spec.Name, safetensors.ShapeString(spec.Shape), where))
			continue
		}
		if !slices.Equal(v.Shape, spec.Shape) {
			problems = append(problems, fmt.Sprintf("tensor %s: shape %s, want %s", spec.Name, safetensors.ShapeString(v.Shape), safetensors.ShapeString(spec.Shape)))
		}
		if !v.Dtype.IsFloat() {
			problems = append(problems, fmt.Sprintf("tensor %s: dtype %s, want F32, BF16 or F16", spec.Name, v.Dtype))
		}
	}
	for _, name := range w.Names() {
		if _, ok := expected[name]; ok || strings.HasSuffix(name, ".rotary_emb.inv_freq") {
			continue
		}
		why := ""
		if name == "lm_head.weight" && cfg.TieWordEmbeddings {
			why = " (tie_word_embeddings is true: the embedding is the lm_head)"
		}
		problems = append(problems, fmt.Sprintf("tensor %s: unexpected for %s with %d layers%s", name, cfg.ModelType, cfg.NumHiddenLayers, why))
	}
	if len(problems) == 0 {
		return nil
	}
	if len(problems) > maxWeightProblems {
		problems = append(problems[:maxWeightProblems], fmt.Sprintf("and %d more problems", len(problems)-maxWeightProblems))
	}
	return fmt.Errorf("check weights: %s", strings.Join(problems, "\n"))
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return out
}

// writeDirAtomic creates the directory dir through fill, which writes the files
// into a temp directory beside dir; the temp directory is then renamed to dir, so
// dir appears complete or not at all. An existing dir must be empty unless force,
// in which case the old dir is moved aside, replaced, then removed.
func writeDirAtomic(dir string, force bool, fill func(tmp string) error) error {
	dir = filepath.Clean(dir)
	parent, base := filepath.Split(dir)
	if parent == "" {
		parent = "."
	}
	exists := false
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s exists and is not a directory", dir)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		if len(entries) > 0 && !force {
			return fmt.Errorf("%s is not empty (%d entries); refusing to overwrite it", dir, len(entries))
		}
		exists = len(entries) > 0
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := fsutil.MkdirAll(parent, 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-*")
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := fill(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	if err := fsutil.SyncDir(tmp); err != nil {
		os.RemoveAll(tmp)
		return err
	}
	var old string
	if exists {
		old = filepath.Join(parent, "."+base+".old-"+filepath.Base(tmp)[len(base)+6:])
		if err := os.Rename(dir, old); err != nil {
			os.RemoveAll(tmp)
			return err
		}
	}
	// rename(2) replaces an empty directory (os.Rename refuses to), so an existing
	// empty dir needs no care.
	if err := unix.Rename(tmp, dir); err != nil {
		if old != "" {
			os.Rename(old, dir)
		}
		os.RemoveAll(tmp)
		return &os.LinkError{Op: "rename", Old: tmp, New: dir, Err: err}
	}
	if err := fsutil.SyncDir(parent); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

// checkTokenizerFile returns an error unless the tokenizer.json at path has tok's
// fingerprint. It hashes the bytes; it does not parse them.
func checkTokenizerFile(path string, tok tokenizer.Tokenizer) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("load tokenizer: %w", err)
	}
	fp := tokenizer.Fingerprint(raw)
	if want := tok.Fingerprint(); fp != want {
		return fmt.Errorf("%s: fingerprint %s, want %s (the tokenizer it must share)", path, fp, want)
	}
	return nil
}
