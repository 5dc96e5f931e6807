// Package data owns what hindsight reads and writes besides rollouts: model
// directories and their Hugging Face config.json (with the tokenizer from
// data/tokenizer and the weights from data/safetensors), checkpoints, and the
// credit-annotated output files.
//
// In the data flow (docs/design.md) it sits at both ends of the trainer: the xla
// stage loads weights and configs from here, and finished steps are written back as
// atomic checkpoints and credit files. data never runs a graph and never imports
// GoMLX.
package data
