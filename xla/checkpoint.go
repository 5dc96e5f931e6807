package xla

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"

	"github.com/hindsight-ai/hindsight/credit"
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
//	trainer_state.json             step (StepCount), baselines, RNG, trained rollout_ids,
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
// does not own (code version, effective config); its Trained, Baselines, RNG and
// the optimizer and teacher entries of Extra are set here.
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
	if tr.model.lora == nil && tr.masters != nil { // bf16: the policy is the masters, rounded to dtype
		model = tr.masterTensors("", dtype)
	} else if tr.model.lora == nil { // a LoRA run's root is the merged policy (loraCheckpoint)
		if model, err = namedTensors(params, "", dtype); err != nil {
			return nil, fmt.Errorf("checkpoint: model: %w", err)
		}
	}
	var opt []safetensors.NamedTensor
	for i, v := range params {
		name := HFName(v.Scope(), v.Name())
		opt = append(opt, tensorNamed(expAvgPrefix+name, tr.opt.m[i], safetensors.DtypeF32), tensorNamed(expAvgSqPrefix+name, tr.opt.v[i], safetensors.DtypeF32))
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
	st.Trained = append([]string(nil), tr.trained...)
	st.TrainedTotal = tr.trainedTotal
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
	extra["teacher"], _ = json.Marshal(teacherState{Mode: tr.opts.Teacher.Mode})
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

// Restore loads the trainer's state from checkpoint directory dir, which must
// verify (checkpoint.Verify): master weights (when the model file is not F32;
// otherwise the weights the model was opened with must be the checkpoint's),
// optimizer moments and step, teacher, baselines, RNG and trained rollout_ids. The
// Trainer should be new, over the model opened from dir (OpenModel(dir)); a LoRA
// Trainer over the base model directory, its adapters read from dir's adapter/.
func (tr *Trainer) Restore(dir string) (*checkpoint.TrainerState, error) {
	st, err := checkpoint.Verify(dir)
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	fail := func(format string, a ...any) (*checkpoint.TrainerState, error) {
		return nil, fmt.Errorf("restore %s: %s", dir, fmt.Sprintf(format, a...))
	}
	var optSt optimizerState
	if err := json.Unmarshal(st.Extra["optimizer"], &optSt); err != nil {
		return fail("optimizer state: %v", err)
	}
	if optSt.Step < 0 || optSt.Step > st.Step {
		return fail("optimizer state: %d updates at step %d, want 0…%d", optSt.Step, st.Step, st.Step)
	}
	if err := tr.loraRestore(dir, st); err != nil { // before the moments: it says which run wrote dir
		return fail("%v", err)
	}
	of, err := safetensors.Open(checkpoint.TrainerFile(dir, checkpoint.OptimizerFileName))
	if err != nil {
		return fail("%v", err)
	}
	defer of.Close()
	load := func(f interface {
		Tensor(string) (safetensors.TensorView, error)
	}, name string, like *tensors.Tensor) (*tensors.Tensor, error) {
		view, err := f.Tensor(name)
		if err != nil {
			return nil, err
		}
		vals, err := view.Float32s()
		if err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		t := tensors.FromFlatDataAndDimensions(vals, view.Shape...)
		if !slices.Equal(like.Shape().Dimensions, view.Shape) {
			return nil, fmt.Errorf("tensor %s: shape %v, want %v", name, view.Shape, like.Shape().Dimensions)
		}
		return t, nil
	}
	hasMaster := false
	for _, n := range of.Names() {
		hasMaster = hasMaster || strings.HasPrefix(n, masterPrefix)
	}
	params := tr.grad.params
	// A bf16 policy's masters are master.* (a bf16 or f16 model file), else the F32
	// model file itself.
	masterFile := masterSource(of)
	if tr.masters != nil && !hasMaster {
		mf, err := safetensors.Open(filepath.Join(dir, safetensors.FileName))
		if err != nil {
			return fail("%v", err)
		}
		defer mf.Close()
		masterFile = masterSource(mf)
	}
	var masters []*tensors.Tensor
	ms, vs := make([]*tensors.Tensor, len(params)), make([]*tensors.Tensor, len(params))
	for i, v := range params {
		name := HFName(v.Scope(), v.Name())
		cur := v.MustValue()
		if ms[i], err = load(of, expAvgPrefix+name, cur); err != nil {
			return fail("%v", err)
		}
		if vs[i], err = load(of, expAvgSqPrefix+name, cur); err != nil {
			return fail("%v", err)
		}
		if tr.masters != nil {
			w, err := load(masterFile, masterFile.prefix+name, cur)
			if err != nil {
				return fail("%v", err)
			}
			masters = append(masters, w)
		} else if hasMaster {
			w, err := load(of, masterPrefix+name, cur)
			if err != nil {
				return fail("%v", err)
			}
			if err := v.SetValue(w); err != nil {
				return fail("%s: %v", name, err)
			}
		}
	}
	if tr.teacher != nil && tr.teacher.cfg.Mode != TeacherBase {
		tf, err := safetensors.Open(checkpoint.TrainerFile(dir, checkpoint.TeacherFileName))
		switch {
		case errors.Is(err, os.ErrNotExist):
			// A checkpoint of a live-teacher run: the snapshot starts from the policy.
			if err := copyWeights(tr.teacher.model, tr.model); err != nil {
				return fail("%v", err)
			}
		case err != nil:
			return fail("%v", err)
		default:
			defer tf.Close()
			for _, v := range trainables(tr.teacher.model) {
				w, err := load(tf, HFName(v.Scope(), v.Name()), v.MustValue())
				if err != nil {
					return fail("teacher: %v", err)
				}
				if err := v.SetValue(inDType(w, v.Shape().DType)); err != nil {
					return fail("teacher: %v", err)
				}
			}
		}
	}
	b := credit.NewBaselines()
	if len(st.Baselines) > 0 {
		if err := json.Unmarshal(st.Baselines, b); err != nil {
			return fail("baselines: %v", err)
		}
		if b.Task == nil {
			b.Task = map[string]float64{}
		}
	}
	if len(st.RNG) > 0 {
		var raw []byte
		if err := json.Unmarshal(st.RNG, &raw); err != nil {
			return fail("rng: %v", err)
		}
		if err := tr.pcg.UnmarshalBinary(raw); err != nil {
			return fail("rng: %v", err)
		}
	}
	if masters != nil {
		if err := tr.masters.set(masters, params); err != nil {
			return fail("%v", err)
		}
	}
	for i := range params {
		tr.opt.m[i].FinalizeAll()
		tr.opt.v[i].FinalizeAll()
	}
	tr.opt.m, tr.opt.v, tr.opt.step = ms, vs, optSt.Step
	tr.steps = st.Step
	tr.baselines = b
	tr.trained = append([]string(nil), st.Trained...)
	tr.trainedTotal = max(st.TrainedTotal, int64(len(st.Trained)))
	return st, nil
}
