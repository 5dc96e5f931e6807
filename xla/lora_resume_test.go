package xla

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// TestLoRAExactResume: 2N LoRA steps straight give bit for bit the adapters,
// moments, EMA teacher, baselines and RNG of N steps, a checkpoint, a fresh
// process's restore (base from the model directory, adapters from adapter/) and N
// more steps, for a float32 and a bfloat16 base, and for a bfloat16 base kept in
// bfloat16 on the device (precision bf16; the adapters float32); the checkpoint's
// root is the merged policy in the model's dtype.
func TestLoRAExactResume(t *testing.T) {
	backend := newTestBackend(t)
	const N = 2
	for _, variant := range []string{"float32", "bfloat16", "bfloat16-bf16"} {
		dtype, bf16 := strings.CutSuffix(variant, "-bf16")
		prec := map[bool]Precision{false: PrecisionF32, true: PrecisionBF16}[bf16]
		t.Run(variant, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "model")
			_, err := dataInitModel(dir, dtype)
			require.NoError(t, err)
			pool := rolloutPool(6, 13)
			open := func() *Model {
				m, err := Open(dir, OpenOptions{Precision: prec})
				require.NoError(t, err)
				return m
			}
			straight, err := NewTrainer(backend, open(), loraOptions(open()))
			require.NoError(t, err)
			require.Nil(t, straight.masters, "LoRA's adapters are float32: no masters")
			require.Equal(t, prec.DType(), straight.model.ctx.GetVariableByScopeAndName("/model/layers/0/mlp/up_proj", "weight").Shape().DType, "the frozen base in the model's precision")
			trainSteps(t, straight, pool, 2*N)

			first, err := NewTrainer(backend, open(), loraOptions(open()))
			require.NoError(t, err)
			trainSteps(t, first, pool, N)
			files, err := checkpoint.ModelFiles(dir)
			require.NoError(t, err)
			root := filepath.Join(t.TempDir(), "checkpoints")
			ckdir, err := first.SaveCheckpoint(root, files, checkpoint.TrainerState{CodeVersion: "test"}, 2)
			require.NoError(t, err)
			merged, err := mergedTensors(backend, first.model, safetensors.DtypeF32)
			require.NoError(t, err)
			first = nil

			latest, _, err := checkpoint.Latest(root, zerolog.Nop())
			require.NoError(t, err)
			require.Equal(t, ckdir, latest)
			md, err := data.OpenModelDir(latest)
			require.NoError(t, err)
			q, err := md.Weights.Tensor("model.layers.1.self_attn.q_proj.weight")
			require.NoError(t, err)
			want := safetensors.DtypeF32
			if dtype == "bfloat16" {
				want = safetensors.DtypeBF16
			}
			require.Equal(t, want, q.Dtype)
			vals, err := q.Float32s()
			require.NoError(t, err)
			for _, nt := range merged {
				if nt.Name == "model.layers.1.self_attn.q_proj.weight" {
					for i := range vals {
						require.InDelta(t, nt.Values[i], vals[i], 1e-2*float64(max(1, abs32(nt.Values[i]))), "root holds the merged policy")
					}
				}
			}
			md.Close()

			resumed, err := NewTrainer(backend, open(), loraOptions(open()))
			require.NoError(t, err)
			_, err = resumed.Restore(latest)
			require.NoError(t, err)
			trainSteps(t, resumed, pool, N)
			require.Equal(t, weightsOf(straight.model), weightsOf(resumed.model), "base and adapters")
			require.Equal(t, weightsOf(straight.teacher.model), weightsOf(resumed.teacher.model), "teacher")
			require.Equal(t, momentsOf(straight), momentsOf(resumed), "optimizer moments")
			require.Equal(t, straight.baselines, resumed.baselines)
			require.Equal(t, straight.Rand().Uint64(), resumed.Rand().Uint64())

			// A full-training trainer refuses the LoRA checkpoint, and a LoRA trainer
			// of another rank refuses it, each saying why.
			fullOpts := resumeOptions(open())
			if bf16 {
				fullOpts = bf16Options(open())
			}
			full, err := NewTrainer(backend, open(), fullOpts)
			require.NoError(t, err)
			_, err = full.Restore(latest)
			require.ErrorContains(t, err, "written by LoRA training")
			o := loraOptions(open())
			o.LoRA.Rank = 8
			other, err := NewTrainer(backend, open(), o)
			require.NoError(t, err)
			_, err = other.Restore(latest)
			require.ErrorContains(t, err, "train.lora: rank 8, alpha 8")
		})
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestLoRACheckpointFollowsPEFT checks a LoRA checkpoint's adapter directory
// against the rules of the loaders that read it:
//
//   - PEFT 0.13.2 save_pretrained (peft/peft_model.py) writes adapter_model.safetensors
//     (utils/constants.py SAFETENSORS_WEIGHTS_NAME) and adapter_config.json
//     (CONFIG_NAME); get_peft_model_state_dict (utils/save_and_load.py) keeps the
//     state-dict keys containing "lora_" and removes ".<adapter_name>", so keys are
//     base_model.model.<module>.lora_A.weight / .lora_B.weight, A [r, in], B [out, r]
//     (nn.Linear(in, r) and nn.Linear(r, out) weights); on load, load_peft_weights
//     (the same file) reads adapter_model.safetensors when it exists, and
//     set_peft_model_state_dict puts the adapter name back in each key.
//   - vLLM vllm/lora/peft_helper.py PEFTHelper.from_dict requires r, lora_alpha and
//     target_modules, rejects modules_to_save and use_dora, and scales by
//     lora_alpha/r (lora_alpha/√r with use_rslora); vllm/lora/models.py (lora_model.py
//     in newer releases) LoRAModel.from_local_checkpoint reads
//     adapter_model.safetensors and refuses a tensor whose module, after
//     vllm/lora/utils.py parse_fine_tuned_lora_name strips "base_model.model." and
//     ".lora_A.weight", does not end in one of the model's LoRA modules; the
//     worker refuses an adapter whose r exceeds --max-lora-rank (default 16).
//
// The root keeps a single weights file (docs/training.md "Checkpoint layout"), and the
// manifest lists the adapter's files.
func TestLoRACheckpointFollowsPEFT(t *testing.T) {
	backend := newTestBackend(t)
	dir := tinyModelDir(t)
	m, err := Open(dir, OpenOptions{})
	require.NoError(t, err)
	opts := loraOptions(nil)
	opts.Credit.KLBeta = 0
	opts.LoRA.Targets = []string{"q_proj", "v_proj", "down_proj"}
	opts.LoRA.BaseModel = dir
	tr, err := NewTrainer(backend, m, opts)
	require.NoError(t, err)
	trainSteps(t, tr, rolloutPool(3, 2), 1)
	files, err := checkpoint.ModelFiles(dir)
	require.NoError(t, err)
	ck, err := tr.SaveCheckpoint(t.TempDir(), files, checkpoint.TrainerState{}, 1)
	require.NoError(t, err)

	var top []string
	ents, err := os.ReadDir(ck)
	require.NoError(t, err)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".safetensors") {
			top = append(top, e.Name())
		}
	}
	require.Equal(t, []string{"model.safetensors"}, top)

	ad := filepath.Join(ck, checkpoint.AdapterDirName)
	var cfg map[string]any
	raw, err := os.ReadFile(filepath.Join(ad, "adapter_config.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Equal(t, "LORA", cfg["peft_type"])
	require.Equal(t, "CAUSAL_LM", cfg["task_type"])
	require.EqualValues(t, 4, cfg["r"])
	require.EqualValues(t, 8, cfg["lora_alpha"])
	require.Equal(t, []any{"down_proj", "q_proj", "v_proj"}, cfg["target_modules"])
	require.Equal(t, dir, cfg["base_model_name_or_path"])
	require.Nil(t, cfg["modules_to_save"])
	require.Equal(t, false, cfg["use_dora"])
	require.Equal(t, false, cfg["use_rslora"])
	require.Equal(t, "none", cfg["bias"])

	f, err := safetensors.Open(filepath.Join(ad, "adapter_model.safetensors"))
	require.NoError(t, err)
	defer f.Close()
	names := f.Names()
	require.Len(t, names, 2*3*m.Config.NumHiddenLayers)
	vllmModules := []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
	for _, n := range names {
		require.True(t, strings.HasPrefix(n, "base_model.model.model.layers."), n)
		module, isA := strings.CutSuffix(strings.TrimPrefix(n, "base_model.model."), ".lora_A.weight")
		if !isA {
			var isB bool
			module, isB = strings.CutSuffix(module, ".lora_B.weight")
			require.True(t, isB, n)
		}
		last := module[strings.LastIndexByte(module, '.')+1:]
		require.Contains(t, vllmModules, last)
		require.NotContains(t, n, ".default.", "no adapter name in the key")
		v, err := f.Tensor(n)
		require.NoError(t, err)
		require.Equal(t, safetensors.DtypeF32, v.Dtype)
		mod := loraModules(m.Config, []string{last})[0]
		if isA {
			require.Equal(t, []int{4, mod.In}, v.Shape, n)
		} else {
			require.Equal(t, []int{mod.Out, 4}, v.Shape, n)
		}
	}
	require.True(t, slices.Contains(names, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"))
	st, err := checkpoint.Verify(ck)
	require.NoError(t, err)
	var ls loraState
	require.NoError(t, json.Unmarshal(st.Extra["lora"], &ls))
	require.Equal(t, loraState{Rank: 4, Alpha: 8, Targets: opts.LoRA.Targets}, ls)
	mb, err := os.ReadFile(filepath.Join(ck, checkpoint.ManifestFileName))
	require.NoError(t, err)
	require.Contains(t, string(mb), checkpoint.AdapterModelFileName)
	require.Contains(t, string(mb), checkpoint.AdapterConfigFileName)

	// PEFT's own reader of the config takes it back.
	back, err := ReadAdapterConfig(ad)
	require.NoError(t, err)
	require.Equal(t, LoRAConfig{Rank: 4, Alpha: 8, Targets: []string{"down_proj", "q_proj", "v_proj"}, BaseModel: dir}, back)
}
