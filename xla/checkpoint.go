package xla

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// A checkpoint (docs/design.md "Checkpoints") is a model directory plus the trainer's
// files. The Trainer fills:
//
//	model.safetensors              the policy under HF names, in config.json's torch_dtype
//	trainer/optimizer.safetensors  exp_avg.<name>, exp_avg_sq.<name> (F32) and, when the
//	                               model file is bf16/f16, master.<name>: the float32
//	                               master weights
//	trainer/teacher.safetensors    the frozen or EMA teacher under HF names (F32), if any
//	trainer_state.json             step (StepCount), baselines, RNG (the trained
//	                               rollout_ids are the caller's: the ledger's),
//	                               Extra["optimizer"] (step: UpdateCount) and
//	                               Extra["teacher"] (mode)
//
// Only model.safetensors is at the top level, so a server that loads every
// *.safetensors there (vLLM, SGLang) loads the policy alone. Checkpoints of older
// versions keep the optimizer and teacher files at the top level; Restore reads both
// layouts (checkpoint.TrainerFile). config.json, the tokenizer and chat template files come
// from the caller (checkpoint.ModelFiles).

// Tensor-name prefixes of optimizer.safetensors.
const (
	expAvgPrefix   = "exp_avg."
	expAvgSqPrefix = "exp_avg_sq."
	masterPrefix   = "master."
)

type optimizerState struct {
	Step int64 `json:"step"` // updates applied; ≤ the checkpoint's step
}

type teacherState struct {
	Mode TeacherMode `json:"mode"`
}

// HFName is the Hugging Face tensor name of a variable: the inverse of HFScope.
func HFName(scope, variable string) string {
	s := strings.ReplaceAll(strings.TrimPrefix(scope, "/"), "/", ".")
	if s == "" {
		return variable
	}
	return s + "." + variable
}

// namedTensors returns the variables of m as tensors under HF names in dtype.
func namedTensors(vars []*mlctx.Variable, prefix string, dtype safetensors.Dtype) ([]safetensors.NamedTensor, error) {
	out := make([]safetensors.NamedTensor, 0, len(vars))
	for _, v := range vars {
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.ScopeAndName(), err)
		}
		out = append(out, tensorNamed(prefix+HFName(v.Scope(), v.Name()), t, dtype))
	}
	return out, nil
}

func tensorNamed(name string, t *tensors.Tensor, dtype safetensors.Dtype) safetensors.NamedTensor {
	return safetensors.NamedTensor{Name: name, Dtype: dtype, Shape: t.Shape().Dimensions, Values: float32sOf(t)}
}

// Checkpoint returns the trainer's state after StepCount() steps as a
// checkpoint.Contents, with files (checkpoint.ModelFiles of the model directory: config.json,
// the tokenizer and chat template files) written beside the tensors. state carries what the trainer
// does not own (code version, effective config, the trained list and count, which
// the ledger owns); its Baselines, RNG and the optimizer and teacher entries of Extra
// are set here.
func (tr *Trainer) Checkpoint(files map[string][]byte, state checkpoint.TrainerState) (*checkpoint.Contents, error) {
	dtype := safetensors.DtypeF32
	if raw, ok := files[data.ConfigFileName]; ok {
		mc, err := data.ParseModelConfig(raw)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
		switch mc.TorchDtype {
		case "bfloat16":
			dtype = safetensors.DtypeBF16
		case "float16":
			dtype = safetensors.DtypeF16
		}
	}
	params := tr.grad.params
	var model []safetensors.NamedTensor
	var err error
	// A bf16 policy's model file is its masters in dtype (F32: the masters; F16:
	// rounded); a BF16 file is its bfloat16 weights as they are, the policy that ran
	// (split masters round ties away from zero, not to even: splitMaster).
	if tr.model.lora == nil && tr.masters != nil && dtype != safetensors.DtypeBF16 {
		model = tr.masterTensors("", dtype)
	} else if tr.model.lora == nil { // a LoRA run's root is the merged policy (loraCheckpoint)
		if model, err = namedTensors(params, "", dtype); err != nil {
			return nil, fmt.Errorf("checkpoint: model: %w", err)
		}
	}
	var opt []safetensors.NamedTensor
	for i, v := range params {
		name := HFName(v.Scope(), v.Name())
		dims := v.Shape().Dimensions
		opt = append(opt, tensorNamed(expAvgPrefix+name, moment(tr.opt.m[i], dims), safetensors.DtypeF32),
			tensorNamed(expAvgSqPrefix+name, moment(tr.opt.v[i], dims), safetensors.DtypeF32))
	}
	if dtype != safetensors.DtypeF32 && tr.masters != nil {
		opt = append(opt, tr.masterTensors(masterPrefix, safetensors.DtypeF32)...)
	} else if dtype != safetensors.DtypeF32 && tr.model.lora == nil {
		master, err := namedTensors(params, masterPrefix, safetensors.DtypeF32)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: master weights: %w", err)
		}
		opt = append(opt, master...)
	}
	ck := &checkpoint.Contents{Step: tr.steps, Files: files,
		Tensors: map[string][]safetensors.NamedTensor{safetensors.FileName: model, checkpoint.OptimizerFileName: opt}}
	if tr.teacher != nil && tr.teacher.cfg.Mode != TeacherBase {
		tt, err := namedTensors(trainables(tr.teacher.model), "", safetensors.DtypeF32)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: teacher: %w", err)
		}
		ck.Tensors[checkpoint.TeacherFileName] = tt
	}
	st := state
	if st.Baselines, err = json.Marshal(tr.baselines); err != nil {
		return nil, fmt.Errorf("checkpoint: baselines: %w", err)
	}
	rng, err := tr.pcg.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("checkpoint: rng: %w", err)
	}
	if st.RNG, err = json.Marshal(rng); err != nil {
		return nil, fmt.Errorf("checkpoint: rng: %w", err)
	}
	extra := map[string]json.RawMessage{}
	for k, v := range state.Extra {
		extra[k] = v
	}
	extra["optimizer"], _ = json.Marshal(optimizerState{Step: tr.opt.step})
	extra["teacher"], _ = json.Marshal(teacherState{Mode: tr.opts.TeacherModel.Mode})
	if tr.model.lora != nil {
		if err := tr.loraCheckpoint(ck, dtype, extra); err != nil {
			return nil, fmt.Errorf("checkpoint: %w", err)
		}
	}
	st.Extra = extra
	ck.State = st
	return ck, nil
}

// SaveCheckpoint writes Checkpoint(files, state) under root with checkpoint.Write
// (atomic; the latest link moved; the newest keep kept) and returns its directory.
func (tr *Trainer) SaveCheckpoint(root string, files map[string][]byte, state checkpoint.TrainerState, keep int) (string, error) {
	ck, err := tr.Checkpoint(files, state)
	if err != nil {
		return "", err
	}
	return checkpoint.Write(root, ck, keep)
}
