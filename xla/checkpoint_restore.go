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

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
)

// Restore loads the trainer's state from checkpoint directory dir, which must
// verify (checkpoint.Verify): master weights (when the model file is not F32;
// otherwise the weights the model was opened with must be the checkpoint's),
// optimizer moments and step, teacher, baselines and RNG (the trained rollout_ids
// in the returned state are the ledger's to restore). The Trainer should be new,
// over the model opened from dir (Open(dir, …)); a LoRA Trainer over the base
// model directory, its adapters read from dir's adapter/.
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
	opt, err := tr.readOptimizer(dir)
	if err != nil {
		return fail("%v", err)
	}
	if err := tr.restoreTeacher(dir); err != nil {
		return fail("%v", err)
	}
	b, err := restoreBaselines(st)
	if err != nil {
		return fail("baselines: %v", err)
	}
	if err := tr.restoreRNG(st); err != nil {
		return fail("rng: %v", err)
	}
	if err := tr.setOptimizer(opt, optSt.Step); err != nil {
		return fail("%v", err)
	}
	tr.steps = st.Step
	tr.baselines = b
	return st, nil
}

// restoredOptimizer is what a checkpoint's optimizer file holds for the trained
// variables, in their order: AdamW's moments and, for a bf16 policy, the float32
// masters (nil otherwise).
type restoredOptimizer struct {
	m, v, masters []*tensors.Tensor
}

// readOptimizer reads the moments (and a bf16 policy's masters) from dir's
// optimizer file. An f32 policy whose checkpoint wrote a bf16 or f16 model file
// gets its float32 weights back from master.* here, in place.
func (tr *Trainer) readOptimizer(dir string) (*restoredOptimizer, error) {
	of, err := safetensors.Open(checkpoint.TrainerFile(dir, checkpoint.OptimizerFileName))
	if err != nil {
		return nil, err
	}
	defer of.Close()
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
			return nil, err
		}
		defer mf.Close()
		masterFile = masterSource(mf)
	}
	r := &restoredOptimizer{m: make([]*tensors.Tensor, len(params)), v: make([]*tensors.Tensor, len(params))}
	for i, v := range params {
		name := HFName(v.Scope(), v.Name())
		cur := v.MustValue()
		if r.m[i], err = loadTensor(of, expAvgPrefix+name, cur); err != nil {
			return nil, err
		}
		if r.v[i], err = loadTensor(of, expAvgSqPrefix+name, cur); err != nil {
			return nil, err
		}
		if tr.masters != nil {
			w, err := loadTensor(masterFile, masterFile.prefix+name, cur)
			if err != nil {
				return nil, err
			}
			r.masters = append(r.masters, w)
		} else if hasMaster {
			w, err := loadTensor(of, masterPrefix+name, cur)
			if err != nil {
				return nil, err
			}
			if err := v.SetValue(w); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return r, nil
}

// setOptimizer makes r the optimizer's state after step updates (and r's masters
// the bf16 policy's), freeing the moments it replaces.
func (tr *Trainer) setOptimizer(r *restoredOptimizer, step int64) error {
	params := tr.grad.params
	if r.masters != nil {
		if err := tr.masters.set(r.masters, params); err != nil {
			return err
		}
	}
	for i := range params {
		if tr.opt.m[i] != nil { // nil: no update made them yet
			tr.opt.m[i].FinalizeAll()
			tr.opt.v[i].FinalizeAll()
		}
	}
	tr.opt.m, tr.opt.v, tr.opt.step = r.m, r.v, step
	return nil
}

// restoreTeacher loads a frozen or EMA teacher's weights from dir's teacher file;
// a checkpoint of a live-teacher run has none, and the snapshot starts from the
// policy. The live teacher (the policy itself) has nothing to restore.
func (tr *Trainer) restoreTeacher(dir string) error {
	if tr.teacher == nil || tr.teacher.cfg.Mode == TeacherBase {
		return nil
	}
	tf, err := safetensors.Open(checkpoint.TrainerFile(dir, checkpoint.TeacherFileName))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return copyWeights(tr.teacher.model, tr.model)
	case err != nil:
		return err
	}
	defer tf.Close()
	for _, v := range trainables(tr.teacher.model) {
		w, err := loadTensor(tf, HFName(v.Scope(), v.Name()), v.MustValue())
		if err != nil {
			return fmt.Errorf("teacher: %w", err)
		}
		if err := v.SetValue(inDType(w, v.Shape().DType)); err != nil {
			return fmt.Errorf("teacher: %w", err)
		}
	}
	return nil
}

// restoreBaselines returns the outcome baselines st holds (fresh ones when it has
// none).
func restoreBaselines(st *checkpoint.TrainerState) (*credit.Baselines, error) {
	b := credit.NewBaselines()
	if len(st.Baselines) == 0 {
		return b, nil
	}
	if err := json.Unmarshal(st.Baselines, b); err != nil {
		return nil, err
	}
	if b.Task == nil {
		b.Task = map[string]float64{}
	}
	return b, nil
}

// restoreRNG sets the trainer's random stream to the state st holds, if any.
func (tr *Trainer) restoreRNG(st *checkpoint.TrainerState) error {
	if len(st.RNG) == 0 {
		return nil
	}
	var raw []byte
	if err := json.Unmarshal(st.RNG, &raw); err != nil {
		return err
	}
	return tr.pcg.UnmarshalBinary(raw)
}

// loadTensor reads tensor name of f as float32, with like's shape.
func loadTensor(f interface {
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
