package xla

import (
	"fmt"
	"math"
	"slices"

	"github.com/gomlx/gomlx/backends"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// ZeRO-1 (TrainerOptions.ShardOptimizer, train.shard_optimizer): under data
// parallel, each trained parameter has an owner device that keeps its AdamW moments
// and applies its update; the moments of a model are spread over the devices instead
// of all on device 0. The step's gradient total is on every device after the
// all-reduce, so the owner uses its own copy; the global norm (for clipping) is the
// root of the owners' partial sums of squares; the updated parameters are gathered
// back to device 0, from which the other devices copy them as before
// (Model.onDevice). The checkpoint layout does not change.

// shardedAdamW holds the executables of the sharded update.
type shardedAdamW struct {
	update *Exec // adamWGraph with the norm given, per shard (compiled per shard's shapes)
	sumSq  *Exec // Σ x² over a shard's gradients
	// pending are the sources of the last step's device-to-device copies, freed at
	// the next step: a copy may still be reading its source when it returns.
	pending []*tensors.Tensor
}

// copyTo returns a copy of t on device dev, keeping t (to free later) in pending.
func (o *adamW) copyTo(t *tensors.Tensor, dev backends.DeviceNum) (*tensors.Tensor, error) {
	src, err := t.Buffer(o.backend, deviceOf(t))
	if err != nil {
		return nil, err
	}
	buf, err := o.backend.BufferCopyToDevice(src, dev)
	if err != nil {
		return nil, err
	}
	o.sharded.pending = append(o.sharded.pending, t)
	return tensors.FromBuffer(o.backend, buf)
}

// shard makes o keep each parameter's moments on an owner among n devices, chosen
// largest first to the device with the fewest elements so far (the lowest-numbered
// on a tie).
func (o *adamW) shard(n int) error {
	if n <= 1 {
		return nil
	}
	order := make([]int, len(o.m))
	for i := range order {
		order[i] = i
	}
	size := func(i int) int { return o.sizes[i] }
	slices.SortStableFunc(order, func(a, b int) int { return size(b) - size(a) })
	load := make([]int, n)
	o.owners = make([]backends.DeviceNum, len(o.m))
	for _, i := range order {
		d := 0
		for k := 1; k < n; k++ {
			if load[k] < load[d] {
				d = k
			}
		}
		load[d] += size(i)
		o.owners[i] = backends.DeviceNum(d)
	}
	var err error
	o.sharded = &shardedAdamW{}
	if o.sharded.update, err = NewExec(o.backend, func(in []*Node) []*Node {
		return adamWGraph(o.cfg, (len(in)-6)/4, true, noMasters)(in)
	}); err != nil {
		return fmt.Errorf("sharded optimizer: %w", err)
	}
	o.sharded.update.SetMaxCache(-1)
	if o.sharded.sumSq, err = NewExec(o.backend, func(in []*Node) *Node {
		var sq *Node
		for _, x := range in {
			if s := ReduceAllSum(Square(x)); sq == nil {
				sq = s
			} else {
				sq = Add(sq, s)
			}
		}
		return sq
	}); err != nil {
		return fmt.Errorf("sharded optimizer: %w", err)
	}
	o.sharded.sumSq.SetMaxCache(-1)
	return nil
}

// shardOf returns the indices of the parameters device d owns.
func (o *adamW) shardOf(d backends.DeviceNum) []int {
	var idx []int
	for i, w := range o.owners {
		if w == d {
			idx = append(idx, i)
		}
	}
	return idx
}

// applySharded is apply with each parameter updated on its owner (see above). grads
// must be on their owners; params may be anywhere (they are moved). The new
// parameters come back on device 0; the moments stay on their owners.
func (o *adamW) applySharded(params, grads []*tensors.Tensor) (newParams []*tensors.Tensor, norm, lr float64, err error) {
	finalize(o.sharded.pending)
	o.sharded.pending = nil
	grads = slices.Clone(grads)
	for i, g := range grads {
		if _, err := g.Device(); err == nil && deviceOf(g) != o.owners[i] {
			if grads[i], err = o.copyTo(g, o.owners[i]); err != nil {
				return nil, 0, 0, fmt.Errorf("optimizer step %d: gradient to device %d: %w", o.step+1, o.owners[i], err)
			}
		}
	}
	s := o.step
	lr = o.cfg.LRAt(s)
	t := float64(s + 1)
	bc1 := 1 - math.Pow(o.cfg.Beta1, t)
	bc2 := 1 - math.Pow(o.cfg.Beta2, t)
	devices := 0
	for _, d := range o.owners {
		devices = max(devices, int(d)+1)
	}
	// The global norm: every owner's Σ g² over its shard, added on the host in
	// float32 (as one device's graph adds its parameters' sums).
	var sq float32
	for d := range devices {
		idx := o.shardOf(backends.DeviceNum(d))
		if len(idx) == 0 {
			continue
		}
		args := make([]any, len(idx))
		for k, i := range idx {
			args[k] = grads[i]
		}
		out, _, err := o.sharded.sumSq.ExecWithGraphOnDevice(backends.DeviceNum(d), args...)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("optimizer step %d: gradient norm on device %d: %w", s+1, d, err)
		}
		sq += tensors.ToScalar[float32](out[0])
		finalize(out)
	}
	n32 := float32(math.Sqrt(float64(sq)))
	all := make([]int, len(grads))
	for i := range all {
		all[i] = i
	}
	if err := o.fill(all, grads); err != nil { // on the owners, where the gradients are
		return nil, 0, 0, fmt.Errorf("optimizer step %d: %w", s+1, err)
	}
	newParams = make([]*tensors.Tensor, len(params))
	newM, newV := slices.Clone(o.m), slices.Clone(o.v)
	for d := range devices {
		dev := backends.DeviceNum(d)
		idx := o.shardOf(dev)
		if len(idx) == 0 {
			continue
		}
		args := []any{float32(lr), float32(1 - lr*o.cfg.WeightDecay), float32(1 / bc1), float32(1 / math.Sqrt(bc2)),
			float32(o.cfg.ClipNorm), n32}
		for _, group := range [][]*tensors.Tensor{params, grads, o.m, o.v} {
			for _, i := range idx {
				x := group[i]
				if _, err := x.Device(); err == nil && deviceOf(x) != dev {
					if x, err = o.copyTo(x, dev); err != nil {
						return nil, 0, 0, fmt.Errorf("optimizer step %d: to device %d: %w", s+1, d, err)
					}
				}
				args = append(args, donatedOn(x, o.backend, dev))
			}
		}
		out, _, err := o.sharded.update.ExecWithGraphOnDevice(dev, args...)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("optimizer step %d on device %d: %w", s+1, d, err)
		}
		r := listOf(out)
		// Reading the norm waits for the update to finish: on the XLA CPU plugin a
		// device-to-device copy of an output that is not ready yet can copy garbage
		// (TestDataParallelZeRO1 caught it), so the gathers below must wait for it.
		normT := r.next()
		_ = tensors.ToScalar[float32](normT)
		normT.FinalizeAll()
		np := len(idx)
		ps, ms, vs := r.take(np), r.take(np), r.take(np)
		for k, i := range idx {
			p := ps[k]
			if dev != 0 { // gathered on device 0
				if p, err = o.copyTo(p, 0); err != nil {
					return nil, 0, 0, fmt.Errorf("optimizer step %d: parameter to device 0: %w", s+1, err)
				}

			}
			newParams[i], newM[i], newV[i] = p, ms[k], vs[k]
		}
	}
	for _, group := range [][]*tensors.Tensor{grads, o.m, o.v} {
		finalize(group) // what donation left of them
	}
	o.m, o.v = newM, newV
	o.step++
	return newParams, float64(n32), lr, nil
}
