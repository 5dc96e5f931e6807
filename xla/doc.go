// Package xla is the policy model on GoMLX: the Llama-family decoder, the scoring
// passes of the data flow, and the training step (Trainer: loss with credit weights
// held constant, chunked backprop (truncated, or exact in reverse chunk order),
// AdamW, teacher modes, checkpoints).
//
// In the data flow of docs/design.md it sits between teacher/ (which turns hints into
// tokens) and credit/ (which turns log-probs into advantages):
//
//	rollout tokens ──► Scorer.Score        s_t = log π(y_t | y_<t), chunked, KV cache kept
//	hint tokens    ──► Scorer.ScoreHinted  q_t = log π_T(y_t | y_<a, h, y_a..y_<t),
//	                                       reusing the student's KV cache for y_<a
//	credit weights ──► Trainer.Step        −Σ w_t·log π_θ(y_t) → gradient → AdamW
//	prompts        ──► Sampler.Generate    sampled tokens and their log-probs (rollouts
//	                                       for a collector), KV cache per batch
//
// A rollout is processed C positions at a time against a KV cache, and only the
// log-prob of the sampled token leaves each chunk, so no [T, vocab] tensor exists:
// peak memory is the cache plus O(C × vocab). Chunk lengths and cache capacities
// come from a few buckets, so a rollout of any length reuses a handful of compiled
// executables; a scoring chunk attends only to its causal span of the cache (a
// bounded set of sizes, attention_blocked.go), block by block with an online
// softmax, so scoring costs ~T²/2 attention, not T × capacity.
//
// Weights load from a data.ModelDir (or any Weights) through a strict name table
// whose context scopes are the checkpoint's tensor names: "model.layers.0.mlp.up_proj.weight"
// is variable "weight" in scope "/model/layers/0/mlp/up_proj". Model files
// (config.json, safetensors, tokenizers, the checkpoint layout) are parsed by data/;
// xla parses only what it alone defines: its own sections of a checkpoint's
// trainer_state.json (optimizer, teacher, baselines, RNG, LoRA) and a PEFT
// adapter's adapter_config.json (lora_checkpoint.go), whose fields map one to one
// onto LoRAConfig and are checked against what the LoRA graph computes.
//
// With LoRA (lora.go) a projection's scope also holds lora_A [r, in] and lora_B
// [out, r]; linear adds (α/r)·(x·Aᵀ)·Bᵀ, only those are trained, and checkpoints
// write them as a PEFT adapter beside the merged policy (lora_checkpoint.go).
//
// Where things are: the decoder (model.go, rope.go) has one attention
// (attention.go) over a KV-cache layout (kvcache_graph.go in a graph; kvcache.go
// and kvcache_paged.go on the device: contiguous and paged), whose causal spans and
// online softmax are attention_blocked.go; executables take and return flat lists
// that each layout reads and packs itself (execio.go). Scoring is scorer*.go and
// hinted.go; training is train*.go, the loss and its gradient per Backprop mode
// loss.go and gradpass.go, adamw.go, teachermode.go, checkpoint.go; sampling is
// sampler*.go; LoRA is lora*.go.
//
// Matrix products the model builds get a GEMM-based gradient (see gemm.go) instead of
// GoMLX v0.26.0's broadcast-multiply rule, which materialises [batch, M, N, K].
package xla
