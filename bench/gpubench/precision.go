package gpubench

import (
	"fmt"
	"io"

	"github.com/hindsight-ai/hindsight/xla"
)

// ShardDevices is the device count of the precision table's ZeRO-1 columns: one
// node of 8 H200s.
const ShardDevices = 8

// PrecisionRow is one (model, T) of the precision table: the memory model's
// training-step peak for full AdamW and for LoRA r16, in f32 and in bf16, and
// full AdamW with the moments sharded over ShardDevices devices (ZeRO-1,
// train.shard_optimizer), and whether each fits one H200 (H200Bytes).
type PrecisionRow struct {
	Model      string `json:"model"`
	Parameters int64  `json:"parameters"`
	T          int    `json:"T"`
	// Step peaks (MemEstimate.Total), by precision then full/LoRA.
	F32Full  int64 `json:"f32_full_bytes"`
	F32LoRA  int64 `json:"f32_lora_bytes"`
	BF16Full int64 `json:"bf16_full_bytes"`
	BF16LoRA int64 `json:"bf16_lora_bytes"`
	// Full AdamW under ZeRO-1 over ShardDevices: the peak device (device 0, which
	// also keeps bf16's masters and gathers the new weights) holds 1/N of
	// the moments; weights, gradients and activations are whole on every device.
	F32FullZeRO  int64 `json:"f32_full_zero1_bytes"`
	BF16FullZeRO int64 `json:"bf16_full_zero1_bytes"`
	// KV cache of the scoring pass, f32 and bf16.
	F32KV  int64 `json:"f32_kv_bytes"`
	BF16KV int64 `json:"bf16_kv_bytes"`
}

// PrecisionTable evaluates the memory model for models (LoRAModels names) at each T,
// truncated backprop at the default training chunk, in f32 and bf16.
func PrecisionTable(models []string, Ts []int) ([]PrecisionRow, error) {
	var rows []PrecisionRow
	for _, name := range models {
		c, err := modelShape(name)
		if err != nil {
			return nil, fmt.Errorf("precision table: %w", err)
		}
		for _, T := range Ts {
			est := func(lora bool, p xla.Precision) MemEstimate {
				return EstimateMemoryAs(c, T, xla.DefaultChunkTrain, lora, false, p)
			}
			f, h := est(false, xla.PrecisionF32), est(false, xla.PrecisionBF16)
			rows = append(rows, PrecisionRow{Model: name, Parameters: int64(c.NumParameters()), T: T,
				F32Full: f.Total(), F32LoRA: est(true, xla.PrecisionF32).Total(),
				BF16Full: h.Total(), BF16LoRA: est(true, xla.PrecisionBF16).Total(),
				F32FullZeRO: f.ShardedTotal(ShardDevices), BF16FullZeRO: h.ShardedTotal(ShardDevices),
				F32KV: f.KVCache, BF16KV: h.KVCache})
		}
	}
	return rows, nil
}

// WritePrecisionTable prints rows as a Markdown table: each cell the step peak and
// whether it fits one H200.
func WritePrecisionTable(w io.Writer, rows []PrecisionRow) {
	cell := func(b int64) string {
		if b <= H200Bytes {
			return gib(b) + " ✓"
		}
		return gib(b) + " ✗"
	}
	fmt.Fprintf(w, "| model | T | f32 full | f32 LoRA r16 | bf16 full | bf16 LoRA r16 | f32 full, ZeRO-1 over %d | bf16 full, ZeRO-1 over %d | KV cache f32 / bf16 |\n",
		ShardDevices, ShardDevices)
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s / %s |\n", r.Model, r.T, cell(r.F32Full), cell(r.F32LoRA),
			cell(r.BF16Full), cell(r.BF16LoRA), cell(r.F32FullZeRO), cell(r.BF16FullZeRO), gib(r.F32KV), gib(r.BF16KV))
	}
}
