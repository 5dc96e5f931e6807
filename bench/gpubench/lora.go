package gpubench

import (
	"fmt"
	"io"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/xla"
)

// Qwen3_8BShape is a config shaped like Qwen3-8B (36 layers, d = 4096, 32 query and
// 8 KV heads of 128, SwiGLU 12288, untied 151,936-token head; ~8.2B parameters):
// the memory model's "8B" row. It is not a preset: nothing here initialises one.
func Qwen3_8BShape() (*data.ModelConfig, error) {
	c, err := data.PresetConfig("qwen3-1.7b", tokenizer.BytesVocabSize)
	if err != nil {
		return nil, err
	}
	c.NumHiddenLayers, c.HiddenSize, c.IntermediateSize = 36, 4096, 12288
	c.NumAttentionHeads, c.NumKeyValueHeads, c.HeadDim = 32, 8, 128
	c.TieWordEmbeddings = false
	return c, c.Validate()
}

// LoRAModels are the memory model's real-model shapes for the LoRA table.
var LoRAModels = []string{"qwen3-0.6b", "qwen3-1.7b", "qwen3-8b-shape"}

// modelShape returns a preset's config, or Qwen3_8BShape for "qwen3-8b-shape".
func modelShape(name string) (*data.ModelConfig, error) {
	if name == "qwen3-8b-shape" {
		return Qwen3_8BShape()
	}
	return data.PresetConfig(name, tokenizer.BytesVocabSize)
}

// LoRARow is one (model, T) of the LoRA table: the memory model's state (weights,
// gradients, AdamW moments) and whole training-step peak for full AdamW and for
// rank-LoRARank adapters on every projection (base frozen, f32 as hindsight keeps it).
type LoRARow struct {
	Model      string `json:"model"`
	Parameters int64  `json:"parameters"`
	Adapters   int64  `json:"adapter_parameters"`
	T          int    `json:"T"`
	FullState  int64  `json:"full_state_bytes"`
	LoRAState  int64  `json:"lora_state_bytes"`
	FullTotal  int64  `json:"full_step_bytes"`
	LoRATotal  int64  `json:"lora_step_bytes"`
	FullFits   bool   `json:"full_fits_h200"`
	LoRAFits   bool   `json:"lora_fits_h200"`
}

// LoRATable evaluates the memory model for models (LoRAModels names) at each T,
// truncated backprop at the default training chunk, on one H200 (H200Bytes).
func LoRATable(models []string, Ts []int) ([]LoRARow, error) {
	var rows []LoRARow
	for _, name := range models {
		c, err := modelShape(name)
		if err != nil {
			return nil, fmt.Errorf("lora table: %w", err)
		}
		for _, T := range Ts {
			full := EstimateMemory(c, T, xla.DefaultChunkTrain, false, false)
			lora := EstimateMemory(c, T, xla.DefaultChunkTrain, true, false)
			r := LoRARow{Model: name, Parameters: int64(c.NumParameters()), Adapters: lora.Grads / 4, T: T,
				FullState: full.Weights + full.Grads + full.Optimizer, LoRAState: lora.Weights + lora.Grads + lora.Optimizer,
				FullTotal: full.Total(), LoRATotal: lora.Total()}
			r.FullFits, r.LoRAFits = r.FullTotal <= H200Bytes, r.LoRATotal <= H200Bytes
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// WriteLoRATable prints rows as a Markdown table.
func WriteLoRATable(w io.Writer, rows []LoRARow) {
	fits := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintln(w, "| model | params | T | state full / LoRA r16 | step peak full / LoRA r16 | full fits | LoRA fits |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | --- | --- |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.2fB | %d | %s / %s (%.2f×) | %s / %s (%.2f×) | %s | %s |\n", r.Model, float64(r.Parameters)/1e9, r.T,
			gib(r.FullState), gib(r.LoRAState), float64(r.LoRAState)/float64(r.FullState),
			gib(r.FullTotal), gib(r.LoRATotal), float64(r.LoRATotal)/float64(r.FullTotal), fits(r.FullFits), fits(r.LoRAFits))
	}
}
