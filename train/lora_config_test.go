package train

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/xla"
)

// TestLoRAConfig: train.lora is off by default (targets preset to every
// projection), validated with the field path, and teacher_model.mode base needs it.
func TestLoRAConfig(t *testing.T) {
	c := DefaultConfig()
	require.False(t, c.LoRA.Enabled())
	require.Equal(t, xla.LoRATargets, c.LoRA.Targets)
	require.NoError(t, c.Validate("train."))

	c.TeacherModel.Mode = xla.TeacherBase
	require.ErrorContains(t, c.Validate("train."), "train.teacher_model.mode: base is the base model with the LoRA adapters off; it needs train.lora.rank > 0")
	c.LoRA.Rank, c.LoRA.Alpha = 16, 32
	require.NoError(t, c.Validate("train."))

	c.LoRA.Dropout = 0.1
	require.ErrorContains(t, c.Validate("train."), "train.lora.dropout: 0.1 is not supported, want 0")
	c.LoRA.Dropout = 0
	c.LoRA.Targets = []string{"qkv_proj"}
	require.ErrorContains(t, c.Validate("train."), `train.lora.targets[0]: "qkv_proj" is not a module LoRA can adapt`)
	c.LoRA.Targets = xla.DefaultLoRATargets()
	c.LoRA.Alpha = 0
	require.ErrorContains(t, c.Validate("train."), "train.lora.alpha: 0, want a positive number")
}
