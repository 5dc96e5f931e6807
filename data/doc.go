// Package data owns what hindsight reads and writes besides rollouts: tokenizers
// (the embedded byte tokenizer and Hugging Face tokenizer.json byte-level BPE),
// safetensors weights, Hugging Face config.json, checkpoints, and the
// credit-annotated output files.
//
// In the data flow (docs/design.md) it sits at both ends of the trainer: the teacher
// stage turns hint text into tokens with a Tokenizer (always the injection-safe
// EncodeText), the xla stage loads weights and configs from here, and finished
// steps are written back as atomic checkpoints and credit files. data never runs a
// graph and never imports GoMLX.
package data
