// Package data owns what hindsight reads and writes besides rollouts: model
// directories (with their tokenizer, from data/tokenizer), safetensors weights, Hugging Face config.json, checkpoints, and the
// credit-annotated output files.
//
// In the data flow (DESIGN.md) it sits at both ends of the trainer: the xla stage loads weights and configs from here, and finished
// steps are written back as atomic checkpoints and credit files. data never runs a
// graph and never imports GoMLX.
package data
