package xla

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// serverWeightFiles lists the weight files an inference server reads from model
// directory dir, by the rules vLLM and SGLang share (load_format "auto", a local
// directory):
//
//   - vLLM, vllm/model_executor/model_loader/default_loader.py,
//     DefaultModelLoader._prepare_weights (commit 00b5ad0712629374e6352e2b31de0460be0fdf17),
//     and SGLang, python/sglang/srt/model_loader/loader.py,
//     DefaultModelLoader._prepare_weights (commit 005cbe0ea796446e420b6aab62ce51a488f5e7c7):
//     allow_patterns = ["*.safetensors", "*.bin"] (plus "*.pt" when the model falls back
//     to pt); for each pattern in turn `glob.glob(os.path.join(hf_folder, pattern))`
//     (the top level only, not recursive), stopping at the first pattern that matches.
//   - Then, for safetensors, weight_utils.filter_duplicate_safetensors_files: when
//     model.safetensors.index.json exists, only the files its weight_map names are
//     kept; without it every matched file is kept.
//   - (vLLM only: when "*.safetensors" matches nothing at the top level, the shards
//     the index names are used; not reached by a directory with model.safetensors.)
//
// Every tensor of every file listed is then handed to the model's load_weights.
func serverWeightFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.safetensors", "*.bin", "*.pt"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		require.NoError(t, err)
		files = append(files, m...)
		if len(files) > 0 {
			if pattern != "*.safetensors" {
				return files
			}
			break
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors.index.json"))
	if os.IsNotExist(err) {
		return files
	}
	require.NoError(t, err)
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	require.NoError(t, json.Unmarshal(raw, &index))
	var kept []string
	for _, f := range files {
		for _, shard := range index.WeightMap {
			if filepath.Join(dir, shard) == f {
				kept = append(kept, f)
				break
			}
		}
	}
	return kept
}

// serverTensors returns every tensor a server would load from dir, by name, and
// fails on a name given twice (load_weights would load one over the other).
func serverTensors(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	out := map[string][]float32{}
	for _, f := range serverWeightFiles(t, dir) {
		sf, err := safetensors.Open(f)
		require.NoError(t, err)
		for _, n := range sf.Names() {
			require.NotContains(t, out, n, "%s: tensor %s is loaded twice", f, n)
			v, err := sf.Tensor(n)
			require.NoError(t, err)
			vals, err := v.Float32s()
			require.NoError(t, err)
			out[n] = slices.Clone(vals) // the view is of the mapped file, closed below
		}
		sf.Close()
	}
	return out
}

// TestCheckpointServable: a trained checkpoint with an EMA teacher (which has the
// policy's tensor names) is listed as vLLM and SGLang list a model directory, and
// they find exactly the policy's tensors with the policy's values; in the layout of
// older versions the same listing loads the optimizer's and the teacher's tensors
// too, which is what the layout fixes.
func TestCheckpointServable(t *testing.T) {
	backend := newTestBackend(t)
	dir := filepath.Join(t.TempDir(), "model")
	_, err := dataInitModel(dir, "float32")
	require.NoError(t, err)
	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	ref, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	tr, err := NewTrainer(backend, m, resumeOptions(ref))
	require.NoError(t, err)
	trainSteps(t, tr, rolloutPool(4, 3), 2)
	require.NotEqual(t, weightsOf(tr.model), weightsOf(tr.teacher.model), "the teacher must differ, or loading it would pass")

	policy := map[string][]float32{}
	for _, v := range variables(tr.model) {
		policy[HFName(v.Scope(), v.Name())] = tensors.MustCopyFlatData[float32](v.MustValue())
	}
	files, err := checkpoint.ModelFiles(dir)
	require.NoError(t, err)
	ck, err := tr.Checkpoint(files, checkpoint.TrainerState{})
	require.NoError(t, err)
	require.Contains(t, ck.Tensors, checkpoint.TeacherFileName)

	ckdir, err := checkpoint.Write(filepath.Join(t.TempDir(), "new"), ck, 0)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(ckdir, safetensors.FileName)}, serverWeightFiles(t, ckdir))
	require.Equal(t, policy, serverTensors(t, ckdir))

	// The old layout, written as older versions did: the listing picks up three files.
	for _, n := range []string{checkpoint.OptimizerFileName, checkpoint.TeacherFileName} {
		ck.Tensors[filepath.Base(n)] = ck.Tensors[n]
		delete(ck.Tensors, n)
	}
	olddir, err := checkpoint.Write(filepath.Join(t.TempDir(), "old"), ck, 0)
	require.NoError(t, err)
	got := serverWeightFiles(t, olddir)
	slices.Sort(got)
	require.Equal(t, []string{filepath.Join(olddir, "model.safetensors"), filepath.Join(olddir, "optimizer.safetensors"),
		filepath.Join(olddir, "teacher.safetensors")}, got)
}
