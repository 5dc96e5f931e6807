package xla

import (
	"errors"
	"fmt"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// TeacherMode says which weights score the hinted passes (docs/design.md "Credit math").
type TeacherMode string

// The teacher modes.
const (
	// TeacherLive is the current policy: no extra weights, and the hinted passes reuse
	// the student pass's prefix KV cache.
	TeacherLive TeacherMode = "live"
	// TeacherFrozen is a snapshot of the policy, refreshed every RefreshEvery steps.
	TeacherFrozen TeacherMode = "frozen"
	// TeacherEMA is an exponential moving average of the policy:
	// θ_T ← θ_T + rate·(θ − θ_T) after every step.
	TeacherEMA TeacherMode = "ema"
	// TeacherBase is the base model with the LoRA adapters off (train.lora only): a
	// frozen teacher that costs no weights, since the base is the policy's own.
	TeacherBase TeacherMode = "base"
)

// TeacherModelConfig says which weights score the teacher passes (train.teacher_model;
// teacher.Config is the hint writer). Defaults: DefaultTeacherModel.
type TeacherModelConfig struct {
	Mode TeacherMode `yaml:"mode"`
	// RefreshEvery is the frozen teacher's refresh period in optimizer steps (0: never).
	RefreshEvery int `yaml:"refresh_every"`
	// EMARate is the EMA teacher's rate per step, in (0, 1].
	EMARate float64 `yaml:"ema_rate"`
}

// DefaultTeacherModel returns the live teacher (refresh 100 and rate 0.05 for the others;
// 0.05 is SDPO's EMA rate, docs/distillation.md "The teacher's weights").
func DefaultTeacherModel() TeacherModelConfig {
	return TeacherModelConfig{Mode: TeacherLive, RefreshEvery: 100, EMARate: 0.05}
}

// Validate names the first bad field.
func (c TeacherModelConfig) Validate() error {
	switch c.Mode {
	case TeacherLive, TeacherFrozen, TeacherEMA, TeacherBase:
	default:
		return fmt.Errorf("mode: %q is not live, frozen, ema or base", c.Mode)
	}
	if c.RefreshEvery < 0 {
		return fmt.Errorf("refresh_every: %d, want ≥ 0", c.RefreshEvery)
	}
	if c.Mode == TeacherEMA && !(c.EMARate > 0 && c.EMARate <= 1) {
		return fmt.Errorf("ema_rate: %g, want (0, 1]", c.EMARate)
	}
	return nil
}

// teacher is the frozen or EMA copy of the policy and its Scorer; nil for live.
type teacher struct {
	cfg     TeacherModelConfig
	backend backends.Backend
	model   *Model
	scorer  *Scorer
	ema     *Exec
}

func newTeacher(backend backends.Backend, cfg TeacherModelConfig, student *Model, opts ScorerOptions) (*teacher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("teacher: %w", err)
	}
	if cfg.Mode == TeacherLive {
		return nil, nil
	}
	if cfg.Mode == TeacherBase && student.lora == nil {
		return nil, errors.New("teacher: mode base is the base model with the LoRA adapters off, and there are none: set train.lora (rank > 0) or use live, frozen or ema")
	}
	if cfg.Mode == TeacherEMA && student.lora == nil && student.Precision() == PrecisionBF16 {
		// An EMA step (rate ~0.01) moves a weight by less than bfloat16's resolution
		// (2⁻⁸ relative), so a bfloat16 EMA copy would hardly move; it would need its
		// own float32 copy, which is not built.
		return nil, errors.New("teacher: mode ema of a full bf16 policy is not supported (a bfloat16 EMA copy loses the updates); use frozen or live, precision f32, or LoRA")
	}
	var m *Model
	var err error
	switch {
	case cfg.Mode == TeacherBase:
		m = baseView(student)
	case student.lora != nil:
		m = cloneLoRA(student)
	default:
		if m, err = cloneModel(student); err != nil {
			return nil, err
		}
	}
	t := &teacher{cfg: cfg, backend: backend, model: m}
	if t.scorer, err = NewScorer(backend, m, opts); err != nil {
		return nil, fmt.Errorf("teacher: %w", err)
	}
	if cfg.Mode == TeacherEMA {
		t.ema, err = NewExec(backend, func(in []*Node) []*Node {
			// in: the rate, the teacher's weights, the student's (as many).
			l := listOf(in)
			rate := l.next()
			n := l.len() / 2
			tws, sws := l.take(n), l.take(n)
			out := make([]*Node, n)
			for i := range n {
				out[i] = Add(tws[i], Mul(Sub(sws[i], tws[i]), rate))
			}
			return out
		})
		if err != nil {
			return nil, fmt.Errorf("teacher: %w", err)
		}
		t.ema.SetMaxCache(-1)
	}
	return t, nil
}

// update moves the teacher after optimizer step `step` (1-based) of student.
func (t *teacher) update(student *Model, step int64) error {
	if t == nil {
		return nil
	}
	switch t.cfg.Mode {
	case TeacherFrozen:
		if t.cfg.RefreshEvery > 0 && step%int64(t.cfg.RefreshEvery) == 0 {
			return copyWeights(t.model, student)
		}
	case TeacherEMA:
		tv, sv := trainables(t.model), trainables(student)
		args := []any{float32(t.cfg.EMARate)}
		for _, v := range tv {
			args = append(args, donated(v.MustValue(), t.backend))
		}
		for _, v := range sv {
			args = append(args, v.MustValue())
		}
		out, err := t.ema.Exec(args...)
		if err != nil {
			return fmt.Errorf("ema teacher: %w", err)
		}
		for i, v := range tv {
			if err := v.SetValue(out[i]); err != nil {
				return fmt.Errorf("ema teacher: %w", err)
			}
		}
	}
	return nil
}

// variables lists m's variables in context order (the order of mc.Tensors()).
func variables(m *Model) []*mlctx.Variable {
	var out []*mlctx.Variable
	for v := range m.ctx.IterVariables() {
		out = append(out, v)
	}
	return out
}

// hostCopy copies a tensor (float32 or bfloat16) through the host, so the copy
// shares no buffer.
func hostCopy(t *tensors.Tensor) *tensors.Tensor {
	c, err := t.LocalClone()
	if err != nil {
		panic(fmt.Errorf("xla: copy %s tensor: %w", t.Shape(), err))
	}
	return c
}

// cloneModel returns a model with the same config and a copy of m's weights.
func cloneModel(m *Model) (*Model, error) {
	ctx := mlctx.New()
	for v := range m.ctx.IterVariables() {
		t, err := v.Value()
		if err != nil {
			return nil, fmt.Errorf("clone model: %s/%s: %w", v.Scope(), v.Name(), err)
		}
		ctx.InAbsPath(v.Scope()).VariableWithValue(v.Name(), hostCopy(t))
	}
	return &Model{Config: m.Config, precision: m.precision, ctx: ctx}, nil
}

// copyWeights sets dst's trained weights (trainables: the adapters of a LoRA
// model) to copies of src's (same config).
func copyWeights(dst, src *Model) error {
	dv, sv := trainables(dst), trainables(src)
	if len(dv) != len(sv) {
		return fmt.Errorf("copy weights: %d variables into %d", len(sv), len(dv))
	}
	for i := range dv {
		if dv[i].ScopeAndName() != sv[i].ScopeAndName() {
			return fmt.Errorf("copy weights: %s into %s", sv[i].ScopeAndName(), dv[i].ScopeAndName())
		}
		if err := dv[i].SetValue(hostCopy(sv[i].MustValue())); err != nil {
			return fmt.Errorf("copy weights: %w", err)
		}
	}
	return nil
}
