package checkpoint

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/stretchr/testify/require"
)

// TestCheckpointTrainerSubdir: trainer files go to trainer/, the manifest lists them
// under that path and a change to one fails verification; names that leave the step
// directory are refused.
func TestCheckpointTrainerSubdir(t *testing.T) {
	root := t.TempDir()
	ck := testCheckpoint(1, 16)
	ck.Tensors[OptimizerFileName] = []safetensors.NamedTensor{{Name: "exp_avg.w", Dtype: safetensors.DtypeF32, Shape: []int{16}, Values: make([]float32, 16)}}
	ck.Tensors[TeacherFileName] = ck.Tensors["model.safetensors"]
	dir, err := Write(root, ck, 0)
	require.NoError(t, err)

	top, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "model.safetensors")}, top)
	for _, n := range []string{OptimizerFileName, TeacherFileName} {
		require.FileExists(t, filepath.Join(dir, TrainerDirName, filepath.Base(n)))
		require.Equal(t, filepath.Join(dir, n), TrainerFile(dir, n))
	}
	_, err = Verify(dir)
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(filepath.Join(dir, OptimizerFileName), []byte("x"), 0o644))
	_, err = Verify(dir)
	require.ErrorContains(t, err, OptimizerFileName)

	for _, bad := range []string{"trainer", "trainer/", "other/x.safetensors", "trainer/../x", "trainer/a/b", "../x", ".hidden"} {
		ck := testCheckpoint(2, 4)
		ck.Files[bad] = []byte("x")
		_, err := Write(t.TempDir(), ck, 0)
		require.ErrorContains(t, err, "bad checkpoint file name", bad)
	}
}

// TestTrainerFileOldLayout: a checkpoint of an older version holds the optimizer at
// the top level; TrainerFile finds it there, and names the new path when neither
// exists (so the error says where it was looked for).
func TestTrainerFileOldLayout(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "optimizer.safetensors"), []byte("x"), 0o644))
	require.Equal(t, filepath.Join(dir, "optimizer.safetensors"), TrainerFile(dir, OptimizerFileName))
	require.Equal(t, filepath.Join(dir, TeacherFileName), TrainerFile(dir, TeacherFileName))
}
