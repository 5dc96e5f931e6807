package gpubench

import (
	"fmt"
	"io"

	"github.com/hindsight-ai/hindsight/xla"
)

// PrecisionRow is one (model, T) of the precision table: the memory model's
// training-step peak for full AdamW and for LoRA r16, in f32 and in bf16, and
// whether each fits one H200 (H200Bytes).
type PrecisionRow struct {
	Model      string `json:"model"`
	Parameters int64  `json:"parameters"`
	T          int    `json:"T"`
	// Step peaks (MemEstimate.Total), by precision then full/LoRA.
	F32Full  int64 `json:"f32_full_bytes"`
	F32LoRA  int64 `json:"f32_lora_bytes"`
	BF16Full int64 `json:"bf16_full_bytes"`
	BF16LoRA int64 `json:"bf16_lora_bytes"`
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
	fmt.Fprintln(w, "| model | T | f32 full | f32 LoRA r16 | bf16 full | bf16 LoRA r16 | KV cache f32 / bf16 |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s / %s |\n", r.Model, r.T, cell(r.F32Full), cell(r.F32LoRA),
			cell(r.BF16Full), cell(r.BF16LoRA), gib(r.F32KV), gib(r.BF16KV))
	}
}
