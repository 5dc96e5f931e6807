package xla

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/distributed"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/credit"
)

// dataParallel spreads a trainer's step over several devices of its backend: each
// optimizer step's rollouts are split over the devices, balanced by tokens; each
// device scores its rollouts (the student pass and, with the live teacher, the
// hinted passes; a frozen or EMA teacher and the KL reference stay on device 0) and
// runs their gradient passes into its own gradient sums, with the policy's weights
// copied to it (Model.onDevice); the sums are added by an all-reduce that stays on
// the devices (GoMLX SPMD, Distributed().AllReduce), and AdamW runs once, on device
// 0, on the total. The weights, the optimizer's moments and everything a checkpoint
// holds are device 0's, as with one device, so a run moves between device counts
// freely.
type dataParallel struct {
	// replicas are the devices' scorers and gradient passes; replicas[0] is the
	// trainer's own (device 0).
	replicas []replica1
	reduce   *graph.Exec // SPMD: every device's gradient sums → their sum, on every device
	settle   *graph.Exec // the trained weights → one float32 (see settled)
}

// replica1 is one device's student scorer and gradient pass, and its scorers of the
// frozen, EMA or base teacher and of the KL reference where the trainer has them
// (nil: the trainer's own, on device 0).
type replica1 struct {
	device       backends.DeviceNum
	scorer       *Scorer
	grad         *gradPass
	teacher, ref *Scorer
}

// onDevice returns a Scorer of the same model and options that runs on device d,
// sharing s's programs (GoMLX compiles them portable: one compile serves every
// device), with its own caches, statistics and zero page.
func (s *Scorer) onDevice(d backends.DeviceNum) *Scorer {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := &Scorer{model: s.model, backend: s.backend, chunk: s.chunk, scores: s.scores, bucket: s.bucket, device: d,
		step: s.step, paged: s.paged, caches: s.caches, seen: map[[3]int]bool{}, views: maps.Clone(s.views)}
	return c
}

// OnDevice returns a Scorer of the same model and options that runs on device d of
// its backend (e.g. `xla-cpu,devices=2`), sharing s's compiled programs, with its own
// caches and statistics; the model's weights are copied to d at its first pass. Rollouts
// scored on several devices at once use a CPU's cores as a data-parallel trainer's
// scoring pass does (docs/performance.md "Where item 4 stands").
func (s *Scorer) OnDevice(d int) (*Scorer, error) {
	if n := s.backend.NumDevices(); d < 0 || d >= n {
		return nil, fmt.Errorf("scorer on device %d: the backend has %d", d, n)
	}
	return s.onDevice(backends.DeviceNum(d)), nil
}

// onDevice returns a gradient pass that runs on device d, sharing p's programs.
func (p *gradPass) onDevice(d backends.DeviceNum) *gradPass {
	c := *p
	c.device, c.stats, c.seen = d, AttentionStats{}, map[[2]int]bool{}
	return &c
}

// newDataParallel returns tr's data-parallel state over n devices (nil for one).
func newDataParallel(tr *Trainer, n int) (*dataParallel, error) {
	if n <= 1 {
		return nil, nil
	}
	if have := tr.backend.NumDevices(); n > have {
		return nil, fmt.Errorf("devices: %d, but the backend has %d", n, have)
	}
	dp := &dataParallel{replicas: []replica1{{device: 0, scorer: tr.scorer, grad: tr.grad}}}
	if v := viewOf(tr.opts.Credit.Distill); v.keeps() {
		// Make the teacher-view programs now, so the devices share them.
		tr.scorer.mu.Lock()
		_, err := tr.scorer.sinkFor(v)
		if err == nil && v.takesIDs() {
			_, err = tr.scorer.sinkFor(v.own()) // the student's top-k pass
		}
		tr.scorer.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if v := viewOf(tr.opts.Credit.Distill); v.keeps() && tr.teacher != nil {
		// The same for the frozen, EMA or base teacher's scorer.
		tr.teacher.scorer.mu.Lock()
		_, err := tr.teacher.scorer.sinkFor(v)
		tr.teacher.scorer.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	for d := 1; d < n; d++ {
		dev := backends.DeviceNum(d)
		r := replica1{device: dev, scorer: tr.scorer.onDevice(dev), grad: tr.grad.onDevice(dev)}
		if tr.teacher != nil {
			r.teacher = tr.teacher.scorer.onDevice(dev)
		}
		if tr.ref != nil {
			r.ref = tr.ref.onDevice(dev)
		}
		dp.replicas = append(dp.replicas, r)
	}
	mesh, err := distributed.NewDeviceMesh([]int{n}, []string{"data"})
	if err != nil {
		return nil, fmt.Errorf("device mesh: %w", err)
	}
	dp.reduce, err = graph.NewExec(tr.backend, func(in []*graph.Node) []*graph.Node {
		return in[0].Graph().Distributed().AllReduce(in, backends.ReduceOpSum)
	})
	if err != nil {
		return nil, fmt.Errorf("gradient all-reduce: %w", err)
	}
	dp.reduce.SPMD(mesh).SetMaxCache(-1)
	dp.settle, err = graph.NewExec(tr.backend, func(in []*graph.Node) *graph.Node {
		var sum *graph.Node
		for _, x := range in {
			first := graph.ConvertDType(graph.Slice(graph.Reshape(x, -1), graph.AxisRange(0, 1)), dtypes.Float32)
			if sum == nil {
				sum = first
			} else {
				sum = graph.Add(sum, first)
			}
		}
		return graph.Reshape(sum) // a scalar
	})
	if err != nil {
		return nil, fmt.Errorf("settle weights: %w", err)
	}
	return dp, nil
}

// Devices is the number of devices the trainer's steps run on.
func (tr *Trainer) Devices() int {
	if tr.dp == nil {
		return 1
	}
	return len(tr.dp.replicas)
}

// rolloutTokens is what a rollout costs a device: its tokens and its hinted passes'.
func rolloutTokens(r *credit.Sequence) int {
	n := len(r.Tokens)
	for _, h := range r.Hints {
		n += len(h.Tokens) + h.End - h.InsertAt
	}
	return n
}

// splitByTokens assigns the rollouts to n devices, longest first to the device
// with the fewest tokens so far (the lowest-numbered on a tie), and returns each
// device's rollout indices in batch order. It is deterministic.
func splitByTokens(batch []credit.Sequence, n int) [][]int {
	order := make([]int, len(batch))
	for i := range order {
		order[i] = i
	}
	cost := make([]int, len(batch))
	for i := range batch {
		cost[i] = rolloutTokens(&batch[i])
	}
	slices.SortStableFunc(order, func(a, b int) int { return cost[b] - cost[a] })
	load := make([]int, n)
	out := make([][]int, n)
	for _, i := range order {
		d := 0
		for k := 1; k < n; k++ {
			if load[k] < load[d] {
				d = k
			}
		}
		load[d] += cost[i]
		out[d] = append(out[d], i)
	}
	for _, idx := range out {
		slices.Sort(idx)
	}
	return out
}

// onDevices runs fn for every device at once, each with its rollout indices, and
// returns the first error (by device).
func (dp *dataParallel) onDevices(parts [][]int, fn func(r replica1, idx []int) error) error {
	errs := make([]error, len(dp.replicas))
	var wg sync.WaitGroup
	for d, r := range dp.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[d] = fn(r, parts[d])
		}()
	}
	wg.Wait()
	for d, err := range errs {
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
	}
	return nil
}

// scoreParallel runs the student pass (and the live teacher's hinted passes) of
// each device's share of batch on that device, filling rs and sc, and returns the
// shares (splitByTokens).
func (tr *Trainer) scoreParallel(ctx context.Context, batch, rs []credit.Sequence, sc []scored) ([][]int, error) {
	parts := splitByTokens(batch, len(tr.dp.replicas))
	err := tr.dp.onDevices(parts, func(r replica1, idx []int) error {
		for _, i := range idx {
			cr, s, err := tr.scoreWith(ctx, &batch[i], r)
			sc[i] = s
			if err != nil {
				return fmt.Errorf("rollout %q: %w", batch[i].ID, err)
			}
			rs[i] = cr
			tr.progress.scored(len(batch[i].Tokens))
		}
		return nil
	})
	return parts, err
}

// settled waits until the update's new weights are written: the devices copy them
// (Model.onDevice), and on the XLA CPU plugin a device-to-device copy of a buffer
// whose computation has not finished can copy garbage (seen with ZeRO-1's gathers:
// TestDataParallelZeRO1). One small program reads the first element of every trained
// weight; reading its result waits for all of them.
func (dp *dataParallel) settled(tr *Trainer) error {
	vars := tr.grad.params
	if tr.teacher != nil && tr.teacher.cfg.Mode != TeacherBase {
		// The EMA step (or a frozen teacher's refresh) wrote the teacher's weights
		// too, and the devices copy them for the teacher passes.
		vars = append(slices.Clone(vars), trainables(tr.teacher.model)...)
	}
	args := make([]any, len(vars))
	for i, v := range vars {
		t, err := v.Value()
		if err != nil {
			return fmt.Errorf("settle %s: %w", v.ScopeAndName(), err)
		}
		args[i] = t
	}
	out, err := dp.settle.Exec(args...)
	if err != nil {
		return fmt.Errorf("settle weights: %w", err)
	}
	_ = tensors.ToScalar[float32](out[0])
	finalize(out)
	return nil
}

// deviceSums are one device's gradient sums and what its passes reported.
type deviceSums struct {
	acc, accD []*tensors.Tensor
	loss      float64
	tokens    int
	signal    bool
}

// accumulateParallel is accumulate with each device running its rollouts' passes
// into its own sums, then the all-reduce of the sums onto device 0.
func (tr *Trainer) accumulateParallel(ctx context.Context, parts [][]int, batch, rs []credit.Sequence, res []credit.Result, sc []scored, budget int, met *Metrics) ([]*tensors.Tensor, bool, error) {
	dp := tr.dp
	split := tr.opts.TermGradNorms
	sums := make([]deviceSums, len(dp.replicas))
	logp, div := make([][]float64, len(batch)), make([][]float64, len(batch))
	err := dp.onDevices(parts, func(r replica1, idx []int) error {
		s := &sums[r.device]
		s.acc = r.grad.zeroGrads()
		if split {
			s.accD = r.grad.zeroGrads()
		}
		for _, i := range idx {
			ok, loss, err := tr.accumulateRollout(ctx, r, i, batch, rs, res, sc, budget, s.acc, s.accD, logp, div)
			if err != nil {
				return err
			}
			tr.progress.gradientDone(len(batch[i].Tokens))
			if ok {
				s.signal = true
				s.loss += loss
				s.tokens += len(batch[i].Tokens)
			}
		}
		// The all-reduce takes every device's sums, so the ones no chunk made yet
		// become zeros (on the device: no host copy to upload).
		if err := r.grad.filled(s.acc); err != nil {
			return err
		}
		if split {
			return r.grad.filled(s.accD)
		}
		return nil
	})
	freeAll := func() {
		for _, s := range sums {
			finalize(s.acc)
			finalize(s.accD)
		}
	}
	if err != nil {
		freeAll()
		return nil, false, err
	}
	signal := false
	for _, s := range sums {
		met.Loss += s.loss
		met.Tokens += s.tokens
		signal = signal || s.signal
	}
	for i := range batch {
		if logp[i] == nil {
			logp[i], div[i] = make([]float64, len(batch[i].Tokens)), make([]float64, len(batch[i].Tokens))
		}
	}
	met.Terms = credit.LossTerms(tr.opts.Credit, rs, res, logp, div, budget)
	acc, err := dp.allReduce(tr, sums, func(s deviceSums) []*tensors.Tensor { return s.acc })
	if err != nil {
		freeAll()
		return nil, false, err
	}
	if !split {
		return acc, signal, nil
	}
	accD, err := dp.allReduce(tr, sums, func(s deviceSums) []*tensors.Tensor { return s.accD })
	if err != nil {
		finalize(acc)
		freeAll()
		return nil, false, err
	}
	sum, no, nd, err := tr.grad.combine(acc, accD)
	if err != nil {
		return nil, false, err
	}
	met.OutGradNorm, met.DistillGradNorm = no, nd
	return sum, signal, nil
}

// allReduce adds every device's sums (of), consuming them, and returns the total on
// device 0: one SPMD program whose AllReduce leaves the total on every device; the
// other devices' copies are freed.
func (dp *dataParallel) allReduce(tr *Trainer, sums []deviceSums, of func(deviceSums) []*tensors.Tensor) ([]*tensors.Tensor, error) {
	n := len(dp.replicas)
	np := len(of(sums[0]))
	args := make([]any, 0, n*np)
	for d := range n {
		xs := of(sums[d])
		if len(xs) != np {
			return nil, errors.New("gradient all-reduce: devices hold different parameter counts")
		}
		for _, t := range xs {
			if _, err := t.Device(); err != nil {
				args = append(args, t) // on the host (a device without rollouts): placed on d
				continue
			}
			args = append(args, donated(t, tr.backend))
		}
	}
	out, err := dp.reduce.Exec(args...)
	for d := range n {
		finalize(of(sums[d])) // what donation left of them
	}
	if err != nil {
		return nil, fmt.Errorf("gradient all-reduce over %d devices: %w", n, err)
	}
	if owners := tr.opt.owners; owners != nil {
		// ZeRO-1: each parameter's total on the device that updates it (zero.go).
		keep := make([]*tensors.Tensor, np)
		for i := range np {
			keep[i] = out[i]
			out[i] = nil
		}
		for _, t := range out {
			if t != nil {
				t.FinalizeAll()
			}
		}
		return keep, nil
	}
	finalize(out[np:])
	return out[:np], nil
}
