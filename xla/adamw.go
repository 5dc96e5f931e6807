package xla

import (
	"errors"
	"fmt"
	"math"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// AdamWConfig is the optimizer: AdamW with decoupled weight decay (as torch.optim.AdamW),
// global gradient-norm clipping, and a linear warm-up then cosine learning-rate
// schedule. Defaults: DefaultAdamW.
type AdamWConfig struct {
	LR          float64 `yaml:"lr"`           // peak learning rate
	MinLR       float64 `yaml:"min_lr"`       // floor of the cosine
	Beta1       float64 `yaml:"beta1"`        // first-moment decay
	Beta2       float64 `yaml:"beta2"`        // second-moment decay
	Eps         float64 `yaml:"eps"`          // added to √v̂
	WeightDecay float64 `yaml:"weight_decay"` // decoupled; applied to matrices only (not norms, biases)
	ClipNorm    float64 `yaml:"clip_norm"`    // global gradient L2 norm bound; 0 turns clipping off
	WarmupSteps int     `yaml:"warmup_steps"` // linear warm-up from LR/WarmupSteps to LR
	TotalSteps  int     `yaml:"total_steps"`  // end of the cosine; 0 keeps LR after warm-up
}

// DefaultAdamW returns lr 1e-6 (a fine-tuning rate for an already trained policy),
// betas 0.9/0.999, eps 1e-8, weight decay 0.01, clip norm 1, 10 warm-up steps, no
// cosine decay.
func DefaultAdamW() AdamWConfig {
	return AdamWConfig{LR: 1e-6, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, ClipNorm: 1, WarmupSteps: 10}
}

// Validate names the first bad field.
func (c AdamWConfig) Validate() error {
	switch {
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("lr: %g, want a positive number", c.LR)
	case c.MinLR < 0 || c.MinLR > c.LR:
		return fmt.Errorf("min_lr: %g, want 0…lr", c.MinLR)
	case !(c.Beta1 >= 0 && c.Beta1 < 1):
		return fmt.Errorf("beta1: %g, want [0, 1)", c.Beta1)
	case !(c.Beta2 >= 0 && c.Beta2 < 1):
		return fmt.Errorf("beta2: %g, want [0, 1)", c.Beta2)
	case !(c.Eps > 0):
		return fmt.Errorf("eps: %g, want a positive number", c.Eps)
	case !(c.WeightDecay >= 0):
		return fmt.Errorf("weight_decay: %g, want ≥ 0", c.WeightDecay)
	case !(c.ClipNorm >= 0):
		return fmt.Errorf("clip_norm: %g, want ≥ 0", c.ClipNorm)
	case c.WarmupSteps < 0:
		return fmt.Errorf("warmup_steps: %d, want ≥ 0", c.WarmupSteps)
	case c.TotalSteps < 0 || (c.TotalSteps > 0 && c.TotalSteps <= c.WarmupSteps):
		return fmt.Errorf("total_steps: %d, want 0 (no decay) or more than warmup_steps", c.TotalSteps)
	}
	return nil
}

// LRAt is the learning rate of optimizer step s (0-based): LR·(s+1)/WarmupSteps
// during warm-up, then a cosine from LR down to MinLR at TotalSteps (MinLR after).
func (c AdamWConfig) LRAt(s int64) float64 {
	if s < int64(c.WarmupSteps) {
		return c.LR * float64(s+1) / float64(c.WarmupSteps)
	}
	if c.TotalSteps <= 0 {
		return c.LR
	}
	p := math.Min(1, float64(s-int64(c.WarmupSteps))/float64(c.TotalSteps-c.WarmupSteps))
	return c.MinLR + 0.5*(c.LR-c.MinLR)*(1+math.Cos(math.Pi*p))
}

// decays says whether AdamW decays a parameter of this shape: matrices (projections,
// embeddings) yes; vectors (norm weights, biases) no, as is usual for transformers.
func decays(rank int) bool { return rank >= 2 }

// adamW holds the moments of every parameter and the executable that applies one
// update on the device.
type adamW struct {
	cfg     AdamWConfig
	backend backends.Backend
	step    int64 // updates applied so far
	// m and v are the first and second moments, one per parameter: nil until an
	// update first needs them (fill: zeros made on the device that runs it).
	m, v  []*tensors.Tensor
	sizes []int // each parameter's element count
	zeros *Exec // float32 zeros shaped as its inputs, two per input (fill)
	exec  *Exec // the whole update (TrainerOptions.WholeUpdate)
	// groups, sumSq and group run the update a group of parameters at a time
	// (applyGroups): the gradient's global norm first (gradNorm: sumSq per group),
	// then each group's update.
	groups [][]int
	sumSq  *Exec // sumSquares of a group's gradients, per group's shapes
	group  *Exec // adamWGraph with the norm given, per group's shapes, for form
	form   masterForm
	// Under splitMasters a group's update is three programs (applySplitGroup): the
	// moments, then the new remainders, then the new bfloat16 weights.
	moments, remainders, weights *Exec
	// owners, under ZeRO-1 (zero.go), is the device that keeps each parameter's
	// moments and updates it; nil: all on device 0.
	owners  []backends.DeviceNum
	sharded *shardedAdamW
}

// newAdamW makes the optimizer of the trained parameters params (their shapes:
// the moments are float32 whatever their dtype), whose masters are kept in form.
func newAdamW(backend backends.Backend, cfg AdamWConfig, params []*tensors.Tensor, groups [][]int, form masterForm) (*adamW, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("optimizer: %w", err)
	}
	o := &adamW{cfg: cfg, backend: backend, groups: groups, form: form,
		m: make([]*tensors.Tensor, len(params)), v: make([]*tensors.Tensor, len(params))}
	for _, p := range params {
		o.sizes = append(o.sizes, p.Shape().Size())
	}
	var err error
	if o.zeros, err = NewExec(backend, func(in []*Node) []*Node {
		var out []*Node
		for range 2 {
			for _, x := range in {
				out = append(out, Zeros(x.Graph(), shapes.Make(dtypes.Float32, x.Shape().Dimensions...)))
			}
		}
		return out
	}); err != nil {
		return nil, fmt.Errorf("new optimizer: %w", err)
	}
	o.zeros.SetMaxCache(-1)
	o.exec, err = NewExec(backend, adamWGraph(cfg, len(params), false, noMasters))
	if err != nil {
		return nil, fmt.Errorf("new optimizer: %w", err)
	}
	o.exec.SetMaxCache(-1)
	if o.sumSq, err = NewExec(backend, func(in []*Node) *Node { return sumSquares(in) }); err != nil {
		return nil, fmt.Errorf("new optimizer: %w", err)
	}
	o.sumSq.SetMaxCache(-1)
	if o.group, err = NewExec(backend, func(in []*Node) []*Node {
		return adamWGraph(cfg, (len(in)-6)/4, true, form)(in)
	}); err != nil {
		return nil, fmt.Errorf("new optimizer: %w", err)
	}
	o.group.SetMaxCache(-1)
	if form == splitMasters {
		if o.moments, err = NewExec(backend, func(in []*Node) []*Node {
			return adamMomentsGraph(cfg, (len(in)-6)/3)(in)
		}); err != nil {
			return nil, fmt.Errorf("new optimizer: %w", err)
		}
		for _, e := range []struct {
			exec **Exec
			hi   bool
		}{{&o.remainders, false}, {&o.weights, true}} {
			if *e.exec, err = NewExec(backend, func(in []*Node) []*Node {
				return adamSplitGraph(cfg, (len(in)-4)/4, e.hi)(in)
			}); err != nil {
				return nil, fmt.Errorf("new optimizer: %w", err)
			}
		}
		for _, e := range []*Exec{o.moments, o.remainders, o.weights} {
			e.SetMaxCache(-1)
		}
	}
	return o, nil
}

// fill makes the moments of parameters idx that have none yet (an update's first
// use) float32 zeros on the device of like[i] (their gradients): made there, not
// on the host and copied (8 bytes a parameter of host memory beside the device's,
// until the first update freed them), and a group at a time, as the update runs.
func (o *adamW) fill(idx []int, like []*tensors.Tensor) error {
	byDev := map[backends.DeviceNum][]int{}
	var devs []backends.DeviceNum
	for _, i := range idx {
		if o.m[i] != nil {
			continue
		}
		d := deviceOf(like[i])
		if byDev[d] == nil {
			devs = append(devs, d)
		}
		byDev[d] = append(byDev[d], i)
	}
	for _, d := range devs {
		todo := byDev[d]
		args := make([]any, len(todo))
		for k, i := range todo {
			args[k] = like[i]
		}
		out, _, err := o.zeros.ExecWithGraphOnDevice(d, args...)
		if err != nil {
			return fmt.Errorf("zero moments: %w", err)
		}
		for k, i := range todo {
			o.m[i], o.v[i] = out[k], out[len(todo)+k]
		}
	}
	return nil
}

// moment is o's moment t of a parameter of dims for the host: t, or zeros when
// no update made it yet.
func moment(t *tensors.Tensor, dims []int) *tensors.Tensor {
	if t == nil {
		return tensors.FromShape(shapes.Make(dtypes.Float32, dims...))
	}
	return t
}

// clipScale is torch.nn.utils.clip_grad_norm_'s factor: min(1, clip/(norm +
// 1e-6)); clip 0 leaves the gradient as is.
func clipScale(clip, norm *Node) *Node {
	g := norm.Graph()
	one := ScalarOne(g, norm.DType())
	return Where(GreaterThan(clip, ScalarZero(g, norm.DType())), Min(one, Div(clip, AddScalar(norm, 1e-6))), one)
}

// adamMoments are AdamW's new first and second moments of gradient gr (clipped).
func adamMoments(cfg AdamWConfig, gr, m, v *Node) (newM, newV *Node) {
	return Add(MulScalar(m, cfg.Beta1), MulScalar(gr, 1-cfg.Beta1)), Add(MulScalar(v, cfg.Beta2), MulScalar(Square(gr), 1-cfg.Beta2))
}

// adamStep is AdamW's new parameter p from the new moments.
func adamStep(cfg AdamWConfig, p, newM, newV, lr, decay, ibc1, isbc2 *Node) *Node {
	if decays(p.Rank()) {
		p = Mul(p, decay)
	}
	denom := AddScalar(Mul(Sqrt(newV), isbc2), cfg.Eps)
	return Sub(p, Div(Mul(newM, Mul(lr, ibc1)), denom))
}

// adamMomentsGraph is the first program of a split-masters group's update: inputs
// lr, decay, 1/bc1, 1/√bc2, clip, the global norm, then np gradients, m, v;
// outputs the new m, then the new v.
func adamMomentsGraph(cfg AdamWConfig, np int) func(in []*Node) []*Node {
	return func(in []*Node) []*Node {
		l := listOf(in)
		l.take(4)
		clip, norm := l.next(), l.next()
		gs, ms, vs := l.take(np), l.take(np), l.take(np)
		scale := clipScale(clip, norm)
		newM, newV := make([]*Node, np), make([]*Node, np)
		for i := range np {
			newM[i], newV[i] = adamMoments(cfg, Mul(gs[i], scale), ms[i], vs[i])
		}
		return append(newM, newV...)
	}
}

// adamSplitGraph is the second (hi false) or third (hi true) program of a
// split-masters group's update: inputs lr, decay, 1/bc1, 1/√bc2, then np bfloat16
// weights, their remainders, the new m and the new v; outputs each new master's
// remainder, or its bfloat16 weight (splitMaster). Each program computes the new
// masters whole and keeps one half: computed once for both halves, XLA CPU held the
// new masters (4 bytes a parameter) as a temporary of the group's program.
func adamSplitGraph(cfg AdamWConfig, np int, hi bool) func(in []*Node) []*Node {
	return func(in []*Node) []*Node {
		l := listOf(in)
		lr, decay, ibc1, isbc2 := l.next(), l.next(), l.next(), l.next()
		his, los, ms, vs := l.take(np), l.take(np), l.take(np), l.take(np)
		out := make([]*Node, np)
		for i := range np {
			w, r := splitMaster(adamStep(cfg, joinMaster(his[i], los[i]), ms[i], vs[i], lr, decay, ibc1, isbc2))
			out[i] = r
			if hi {
				out[i] = w
			}
		}
		return out
	}
}

// adamWGraph is the update of np parameters: inputs lr, decay factor (1 − lr·wd),
// 1/bc1, 1/√bc2, clip norm, with givenNorm the gradient's global norm (a shard's or
// a group's update: the norm is over every parameter), then params, grads, m, v;
// outputs the norm, then the new params, m, v. form says what params are: the
// float32 weights (noMasters) or float32 masters (wholeMasters: their bfloat16
// rounding, the policy's new weights, is output last). Split masters update in
// three programs (applySplitGroup), from the same adamMoments and adamStep.
func adamWGraph(cfg AdamWConfig, np int, givenNorm bool, form masterForm) func(in []*Node) []*Node {
	return func(in []*Node) []*Node {
		l := listOf(in)
		lr, decay, ibc1, isbc2, clip := l.next(), l.next(), l.next(), l.next(), l.next()
		var norm *Node
		if givenNorm {
			norm = l.next()
		}
		ps, gs, ms, vs := l.take(np), l.take(np), l.take(np), l.take(np)
		if !givenNorm {
			norm = globalNorm(gs)
		}
		scale := clipScale(clip, norm)
		out := []*Node{norm}
		newP, newM, newV := make([]*Node, np), make([]*Node, np), make([]*Node, np)
		for i := range np {
			newM[i], newV[i] = adamMoments(cfg, Mul(gs[i], scale), ms[i], vs[i])
			newP[i] = adamStep(cfg, ps[i], newM[i], newV[i], lr, decay, ibc1, isbc2)
		}
		var lows []*Node
		if form == wholeMasters {
			for _, p := range newP {
				lows = append(lows, convert(p, dtypes.BFloat16))
			}
		}
		out = append(out, newP...)
		out = append(out, newM...)
		out = append(out, newV...)
		return append(out, lows...)
	}
}

// applyGroups is apply a group of parameters at a time (o.groups): the gradient's
// global norm over every group first, then each group's update, whose gradients and
// old moments are freed before the next group runs; set receives each parameter's
// new value (adamWGraph's param and bfloat16 outputs for o.form: under
// splitMasters the new remainder and weight) as its group finishes and must free
// the old one. So the update holds, beyond the state, one group's outputs, where
// apply holds every parameter's new value and moments beside the old ones. lo are
// the remainders under splitMasters (params then the bfloat16 weights), else nil.
func (o *adamW) applyGroups(params, lo, grads []*tensors.Tensor, set func(i int, p, low *tensors.Tensor) error) (norm, lr float64, err error) {
	if len(params) != len(o.m) || len(grads) != len(o.m) {
		return 0, 0, errors.New("optimizer: parameter count changed")
	}
	s := o.step
	lr = o.cfg.LRAt(s)
	t := float64(s + 1)
	bc1 := 1 - math.Pow(o.cfg.Beta1, t)
	bc2 := 1 - math.Pow(o.cfg.Beta2, t)
	n32, err := o.gradNorm(grads)
	if err != nil {
		return 0, 0, fmt.Errorf("optimizer step %d: gradient norm: %w", s+1, err)
	}
	for _, idx := range o.groups {
		if err := o.fill(idx, grads); err != nil {
			return 0, 0, fmt.Errorf("optimizer step %d: %w", s+1, err)
		}
		args := []any{float32(lr), float32(1 - lr*o.cfg.WeightDecay), float32(1 / bc1), float32(1 / math.Sqrt(bc2)),
			float32(o.cfg.ClipNorm), n32}
		if o.form == splitMasters {
			if err := o.applySplitGroup(idx, args, params, lo, grads, set); err != nil {
				return 0, 0, fmt.Errorf("optimizer step %d: %w", s+1, err)
			}
			continue
		}
		for _, i := range idx {
			args = append(args, params[i])
		}
		for _, group := range [][]*tensors.Tensor{grads, o.m, o.v} {
			for _, i := range idx {
				args = append(args, donated(group[i], o.backend))
			}
		}
		out, err := o.group.Exec(args...)
		if err != nil {
			return 0, 0, fmt.Errorf("optimizer step %d: %w", s+1, err)
		}
		np := len(idx)
		r := listOf(out)
		r.next().FinalizeAll() // the norm, passed through
		ps, ms, vs := r.take(np), r.take(np), r.take(np)
		var lows []*tensors.Tensor
		if o.form != noMasters {
			lows = r.take(np)
		}
		for k, i := range idx {
			grads[i].FinalizeAll() // what donation left of them
			o.m[i].FinalizeAll()
			o.v[i].FinalizeAll()
			grads[i], o.m[i], o.v[i] = nil, ms[k], vs[k]
			var low *tensors.Tensor
			if lows != nil {
				low = lows[k]
			}
			if err := set(i, ps[k], low); err != nil {
				return 0, 0, fmt.Errorf("optimizer step %d: %w", s+1, err)
			}
		}
	}
	o.step++
	return float64(n32), lr, nil
}

// gradNorm is the global L2 norm of grads: each group's Σ x² (sumSquares) by a
// program of that group's shapes, which every decoder layer's group shares, summed
// in float64 on the host. One program over every gradient grew with the depth: at
// the qwen3-0.6b shape its 311 inputs made 1.2 MB of code, 1.3 s to compile and 0.3 s
// to load at every restart (docs/performance.md "Cold start").
func (o *adamW) gradNorm(grads []*tensors.Tensor) (float32, error) {
	var sq float64
	for _, idx := range o.groups {
		args := make([]any, len(idx))
		for k, i := range idx {
			args[k] = grads[i]
		}
		out, err := o.sumSq.Exec(args...)
		if err != nil {
			return 0, err
		}
		sq += float64(tensors.ToScalar[float32](out[0]))
		finalize(out)
	}
	return float32(math.Sqrt(sq)), nil
}

// sumSquares is Σ x² over every element of xs.
//
//	xs: tensors of any shapes → scalar
func sumSquares(xs []*Node) *Node {
	var sq *Node
	for _, x := range xs {
		s := ReduceAllSum(Square(x))
		if sq == nil {
			sq = s
		} else {
			sq = Add(sq, s)
		}
	}
	return sq
}

// apply runs update o.step+1 on params with grads, replacing o's moments, and returns
// the new parameters, the gradient's global L2 norm before clipping and the
// learning rate used. grads and params are consumed (donated where the backend
// allows).
func (o *adamW) apply(params, grads []*tensors.Tensor) (newParams []*tensors.Tensor, norm, lr float64, err error) {
	if len(params) != len(o.m) || len(grads) != len(o.m) {
		return nil, 0, 0, errors.New("optimizer: parameter count changed")
	}
	if o.owners != nil {
		return o.applySharded(params, grads)
	}
	// A first update's moments, made a group at a time by the programs
	// applyGroups and Trainer.Prepare use (the groups cover every parameter).
	for _, idx := range o.groups {
		if err := o.fill(idx, grads); err != nil {
			return nil, 0, 0, fmt.Errorf("optimizer step %d: %w", o.step+1, err)
		}
	}
	s := o.step
	lr = o.cfg.LRAt(s)
	t := float64(s + 1)
	bc1 := 1 - math.Pow(o.cfg.Beta1, t)
	bc2 := 1 - math.Pow(o.cfg.Beta2, t)
	args := []any{
		float32(lr), float32(1 - lr*o.cfg.WeightDecay), float32(1 / bc1), float32(1 / math.Sqrt(bc2)), float32(o.cfg.ClipNorm),
	}
	for _, group := range [][]*tensors.Tensor{params, grads, o.m, o.v} {
		for _, x := range group {
			args = append(args, donated(x, o.backend))
		}
	}
	out, err := o.exec.Exec(args...)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("optimizer step %d: %w", s+1, err)
	}
	for _, group := range [][]*tensors.Tensor{grads, o.m, o.v} {
		for _, x := range group {
			x.FinalizeAll()
		}
	}
	np := len(params)
	r := listOf(out)
	normT := r.next()
	norm = float64(tensors.ToScalar[float32](normT))
	normT.FinalizeAll()
	newParams = r.take(np)
	o.m, o.v = r.take(np), r.take(np)
	o.step++
	return newParams, norm, lr, nil
}

// applySplitGroup is one group's update (idx) on split masters, in three programs
// so that no program holds the new masters whole beside its outputs: the new
// moments (the gradients and old moments are freed after it), then the new
// remainders, then the new bfloat16 weights, each from the old weight and
// remainder and the new moments; set then takes each parameter's new remainder and
// weight. Beyond the state it holds the new moments while the old ones are inputs
// (8 bytes a parameter of the group), then the new remainders and weights (4).
// scalars are lr, decay, 1/bc1, 1/√bc2, clip and the global norm.
func (o *adamW) applySplitGroup(idx []int, scalars []any, params, lo, grads []*tensors.Tensor, set func(i int, p, low *tensors.Tensor) error) error {
	args := append([]any{}, scalars...)
	for _, group := range [][]*tensors.Tensor{grads, o.m, o.v} {
		for _, i := range idx {
			args = append(args, donated(group[i], o.backend))
		}
	}
	out, err := o.moments.Exec(args...)
	if err != nil {
		return err
	}
	np := len(idx)
	for k, i := range idx {
		grads[i].FinalizeAll()
		o.m[i].FinalizeAll()
		o.v[i].FinalizeAll()
		grads[i], o.m[i], o.v[i] = nil, out[k], out[np+k]
	}
	args = append([]any{}, scalars[:4]...)
	for _, group := range [][]*tensors.Tensor{params, lo, o.m, o.v} {
		for _, i := range idx {
			args = append(args, group[i])
		}
	}
	rs, err := o.remainders.Exec(args...)
	if err != nil {
		return err
	}
	ws, err := o.weights.Exec(args...)
	if err != nil {
		finalize(rs)
		return err
	}
	for k, i := range idx {
		if err := set(i, rs[k], ws[k]); err != nil {
			return err
		}
	}
	return nil
}
