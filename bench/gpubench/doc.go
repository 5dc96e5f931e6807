// Package gpubench is the GPU run (the program in bench/gpu, which `hindsight
// bench-gpu` runs; the product links none of it): it measures hindsight on the device
// it runs on, stage by stage, against a PyTorch peer on the same weights
// and device (bench/gpu/torch_peer.py). Stages, most valuable first:
//
//	peak     matmul FLOP/s of the device measured in the run (XLA f32; PyTorch f32 and bf16)
//	parity   per-token log-probs vs PyTorch (f32 with TF32 off; bf16 max/mean error);
//	         hinted scoring with prefix reuse vs the from-scratch spliced pass
//	speed    scoring and training-step tokens/s per (model, T), FLOPs counted, MFU,
//	         PyTorch eager and torch.compile peers where the local torch has them
//	generate tokens/s of xla.Sampler
//	long     one long rollout scored and trained: time, peak memory, chunk sizes,
//	         truncated vs exact backprop
//	memory   the memory model (weights, optimizer, KV cache, activations) against the
//	         peaks measured above, and which (model, T) fit one H200
//
// Each stage runs under its own time budget; results.json is rewritten (durably)
// after each stage and a log line written as each measurement lands, so a stage
// that fails or runs out of time is recorded and the next one runs. Options.CPU
// selects tiny sizes for the rehearsal on XLA CPU (bench/gpu/run.sh --cpu).
package gpubench
