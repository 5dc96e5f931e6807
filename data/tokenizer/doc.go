// Package tokenizer turns text into token ids and back: the embedded byte tokenizer
// (Bytes) and Hugging Face tokenizer.json byte-level BPE (the families of Qwen, Llama 3,
// Mistral, DeepSeek, SmolLM), behind one Tokenizer interface.
//
// In the data flow (docs/design.md) the teacher stage turns hint text into tokens with
// a Tokenizer (always the injection-safe EncodeText), the inner loop renders chat
// turns with Encode, and rollout files carry the tokenizer's Fingerprint so a file
// scored with another vocabulary is refused. It imports nothing else of hindsight and
// reads only the tokenizer.json it is given.
package tokenizer
