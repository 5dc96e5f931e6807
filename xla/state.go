package xla

// StateBytes is the memory a Trainer holds between steps, by part, in bytes: what
// LoRA shrinks. Weights are in the model's precision; the rest is float32, and
// under bf16 Optimizer includes what the master weights keep beside the bfloat16
// weights (2 bytes a parameter on XLA, 4 on the pure-Go backend). Activations and the KV cache come on top during a
// step (bench/gpubench's memory model).
type StateBytes struct {
	Weights   int64 // every weight of the policy, adapters included
	Trainable int64 // the weights the optimizer updates (the adapters under LoRA)
	Grads     int64 // the gradient accumulators of a step: one per trained weight
	Optimizer int64 // AdamW's two moments per trained weight
	Teacher   int64 // weights the frozen or EMA teacher keeps of its own (a LoRA teacher shares the base)
}

// Total is the sum of the parts (Trainable is part of Weights).
func (s StateBytes) Total() int64 { return s.Weights + s.Grads + s.Optimizer + s.Teacher }

// StateBytes returns the trainer's state sizes.
func (tr *Trainer) StateBytes() StateBytes {
	const f32 = 4
	var trained, weights int64
	for _, v := range tr.grad.params {
		trained += int64(v.Shape().Size())
	}
	for v := range tr.model.ctx.IterVariables() {
		weights += int64(v.Shape().Memory())
	}
	// Under bf16 the masters are kept beside the bfloat16 weights: a 16-bit
	// remainder on XLA, a float32 copy on the pure-Go backend (masterForm).
	s := StateBytes{Weights: weights, Trainable: f32 * trained, Grads: f32 * trained, Optimizer: 2 * f32 * trained}
	if tr.masters != nil {
		s.Optimizer += tr.masters.bytesPerParameter() * trained
	}
	if tr.teacher != nil {
		for _, v := range trainables(tr.teacher.model) {
			if tr.teacher.cfg.Mode != TeacherBase {
				s.Teacher += int64(v.Shape().Memory())
			}
		}
	}
	return s
}
