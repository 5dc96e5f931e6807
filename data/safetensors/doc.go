// Package safetensors reads and writes Hugging Face safetensors weights: one file
// (Open, Write) or a sharded directory with its model.safetensors.index.json
// (OpenDir, WriteSharded), F32, F16 and BF16 converted to float32 on read, other
// dtypes readable as raw bytes. Files are memory-mapped and every header field is
// checked against the file's size before a byte is read, so a truncated or hostile
// file is an error naming the file and the tensor, never a crash.
//
// In the data flow (docs/design.md) it sits under data's model directories and
// checkpoints: the xla stage loads a policy's weights through it and every
// checkpoint's weights are written by it (temp file, fsync, rename, fsync dir).
package safetensors
