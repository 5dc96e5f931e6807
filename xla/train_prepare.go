package xla

import (
	"fmt"
	"runtime/debug"

	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// Prepare makes the Trainer's state resident before its first step: the policy's
// weights placed on the device (Model.place, which the first pass would do) and
// the optimizer's moments there too, zeros where neither an update nor a restored
// checkpoint made them (as the first update would, a group at a time), a restored
// checkpoint's moved from the host. So a first step after a start or a restart
// does a step's work only: at the qwen3-0.6b shape in f32 on XLA CPU that state is
// 2.4 GB of weights and 4.8 GB of moments whose first touch cost as much CPU time as
// a warm step (docs/performance.md "Cold start"). Call it after Restore; the daemon
// does, at start, while the compiled programs preload. The moments of a sharded
// optimizer (ZeRO-1) are left to their owners' first update.
func (tr *Trainer) Prepare() error {
	if err := tr.model.place(tr.backend); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	o := tr.opt
	if o.owners != nil {
		return nil
	}
	params, _ := tr.groupInputs()
	moved := false
	for i, p := range params {
		for _, t := range []**tensors.Tensor{&o.m[i], &o.v[i]} {
			if *t == nil || ((*t).IsOnDevice(deviceOf(p)) && !(*t).HasLocal()) {
				continue
			}
			if err := (*t).MaterializeOnDevice(tr.backend, true, deviceOf(p)); err != nil {
				return fmt.Errorf("prepare: optimizer moments: %w", err)
			}
			(*t).FinalizeLocal()
			moved = true
		}
	}
	if moved {
		debug.FreeOSMemory()
	}
	for _, idx := range o.groups {
		if err := o.fill(idx, params); err != nil {
			return fmt.Errorf("prepare: %w", err)
		}
	}
	return nil
}
