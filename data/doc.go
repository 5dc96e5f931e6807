// Package data owns the model directory: a Hugging Face config.json (ModelConfig,
// validated field by field), its weights and tokenizer (from data/safetensors and
// data/tokenizer), and random initial models (InitModel). Beneath it, by concern:
// data/tokenizer, data/safetensors, data/checkpoint (step directories) and
// data/creditfile (credit output files).
//
// In the data flow (docs/design.md) it sits at both ends of the trainer: the xla
// stage loads weights and configs from here, and finished steps are written back as
// atomic checkpoints and credit files. data never runs a graph and never imports
// GoMLX.
package data
