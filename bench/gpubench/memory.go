package gpubench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/xla"
)

// H200Bytes is the device memory of one H200 as the device reports it (~139 GiB).
const H200Bytes = 139 << 30

// LoRARank is the adapter rank the memory model assumes for "LoRA": rank-16 adapters
// on the seven projections of every layer, the base weights frozen.
const LoRARank = 16

// MemEstimate is the memory model's bytes for one (config, T, chunk) in a precision
// (EstimateMemoryAs): under f32 everything is float32; under bf16 the weights and
// the KV cache are bfloat16, and full fine-tuning adds the masters' 16-bit
// remainders (the float32 masters are the weight and the remainder, on XLA).
type MemEstimate struct {
	Weights   int64 `json:"weights"`
	Masters   int64 `json:"masters"`   // bf16 full fine-tuning: the masters' 16-bit remainders
	Grads     int64 `json:"grads"`     // full fine-tuning: one f32 per parameter
	Optimizer int64 `json:"optimizer"` // AdamW m and v
	KVCache   int64 `json:"kv_cache"`  // the scoring pass's cache (capacity bucket ≥ T)
	Cotangent int64 `json:"cotangent"` // exact backprop: a cache-sized cotangent
	Score     int64 `json:"score_activations"`
	Train     int64 `json:"train_activations"`
	// Update is what the AdamW update allocates beyond the state: the new weights
	// and moments of one group of parameters (a layer, or the embedding) at a time,
	// (under bf16 the new moments first, then the new weights and remainders), less
	// the gradients of the groups already updated (updateTransient).
	Update int64 `json:"update_transient"`
	Chunk  int   `json:"effective_chunk"` // the training chunk after the attention-score budget
}

// Total is peak bytes of a training step: weights, optimizer state, the cache and
// the larger of the scoring and gradient passes' activations.
func (e MemEstimate) Total() int64 {
	return e.Weights + e.Masters + e.Grads + e.Optimizer + e.KVCache + e.Cotangent + max(e.Score, e.Train, e.Update)
}

// State is what outlives a step: weights, masters, gradient accumulators, moments.
func (e MemEstimate) State() int64 { return e.Weights + e.Masters + e.Grads + e.Optimizer }

// Transient is what a pass allocates beyond the state that outlives it (weights,
// AdamW moments): what peak RSS above the RSS before a warm pass measures.
func (e MemEstimate) Transient(train bool) int64 {
	if !train {
		return e.KVCache + e.Score
	}
	return e.Grads + e.KVCache + e.Cotangent + max(e.Score, e.Train, e.Update)
}

// ShardedTotal is Total on the peak device of a data-parallel step over n devices
// with the AdamW moments sharded (ZeRO-1, train.shard_optimizer): each device keeps
// 1/n of the moments; weights, masters (on device 0), gradients (the all-reduce's
// total is on every device) and activations are whole. The sharded update is one
// program per shard on float32 masters (xla/zero.go), so under bf16 device 0 holds
// the masters joined from the weights and remainders while it runs (4 bytes a
// parameter, twice Masters).
func (e MemEstimate) ShardedTotal(n int) int64 {
	s := e
	s.Update += 2 * e.Masters
	return s.Total() - e.Optimizer + (e.Optimizer+int64(n)-1)/int64(n)
}

// ScoreTotal is the peak of a scoring pass alone.
func (e MemEstimate) ScoreTotal() int64 { return e.Weights + e.KVCache + e.Score }

// EstimateMemory models a training step of c on one T-token rollout at training
// chunk `chunk` (scoring at xla.DefaultChunk): lora replaces full gradients and
// AdamW state by those of rank-LoRARank adapters; exact adds the cotangent buffers.
//
// Activations: the scoring pass holds one chunk's hidden states (≈ 6d + 3·inter per
// position), its [chunk, vocab] logits twice (logits, log-softmax) and two
// attention-score tensors (chunk × heads × one block of ≤ 4 chunks); the gradient pass keeps, for
// every layer, the chunk's inputs of each matmul and both attention-score tensors
// for the backward, plus three [chunk, vocab] tensors at the head. Each chunk halves
// (down to 16) while its scores exceed the scorer's or trainer's budget.
func EstimateMemory(c *data.ModelConfig, T, chunk int, lora, exact bool) MemEstimate {
	return EstimateMemoryAs(c, T, chunk, lora, exact, xla.PrecisionF32)
}

// EstimateMemoryAs is EstimateMemory in precision p. Under bf16 the weights (the
// LoRA base) and the KV cache take 2 bytes an element, full fine-tuning keeps a
// 2-byte remainder beside each weight (the float32 master is the two together,
// xla's splitMasters: its state is 16 bytes a parameter, as f32's), and the
// activations are modelled as float32, as the residual stream is; the bfloat16
// copies of matmul inputs and results are not counted (docs/performance.md
// "Training-step memory" measures both precisions against this model).
func EstimateMemoryAs(c *data.ModelConfig, T, chunk int, lora, exact bool, p xla.Precision) MemEstimate {
	const f32 = 4
	w := int64(f32)
	if p == xla.PrecisionBF16 {
		w = 2
	}
	P := c.NumParameters()
	d, inter, L := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.NumHiddenLayers)
	heads, kvd := int64(c.NumAttentionHeads), int64(c.NumKeyValueHeads*c.HeadDim)
	q := heads * int64(c.HeadDim)
	capacity := int64(xla.DefaultChunk)
	for capacity < int64(T) {
		capacity *= 2
	}
	e := MemEstimate{Weights: w * P, KVCache: 2 * L * kvd * capacity * w}
	if lora {
		adapters := L * LoRARank * (2*(d+q) + 2*(d+kvd) + 3*(d+inter))
		e.Grads, e.Optimizer = f32*adapters, 2*f32*adapters
		e.Weights += f32 * adapters
	} else {
		e.Grads, e.Optimizer = f32*P, 2*f32*P
		if w != f32 {
			e.Masters = 2 * P
		}
	}
	if exact {
		e.Cotangent = e.KVCache
	}
	e.Update = updateTransient(c, lora, w != f32)
	// A scoring chunk's scores are one block of its causal span at a time, ≤
	// MaxBlockPages pages of DefaultChunk positions, whatever T is (xla/scorer_paged.go).
	block := min(capacity, int64(xla.MaxBlockPages*xla.DefaultChunk))
	sc := halve(int64(xla.DefaultChunk), heads*block, xla.DefaultAttentionScores)
	e.Score = f32 * (sc*(6*d+3*inter) + 2*sc*int64(c.VocabSize) + 2*sc*heads*block)
	tc := halve(int64(chunk), heads*capacity, xla.DefaultTrainAttentionScores)
	e.Chunk = int(tc)
	perLayer := tc*(4*d+q+2*kvd+3*inter) + 2*tc*heads*capacity
	e.Train = f32 * (L*perLayer + 3*tc*int64(c.VocabSize))
	if int64(T) > tc {
		// From the second chunk on, a chunk's gradient comes out beside the sum it
		// is added to (xla/groups.go: no input–output aliasing in GoMLX v0.26.0).
		e.Train += e.Grads
	}
	return e
}

// updateTransient is what the AdamW update holds beyond the state (xla/adamw.go
// applyGroups): the groups run smallest first (a layer's projections and norms,
// the final norm, the embedding, an untied head; under LoRA a layer's adapters),
// each allocating its new weights and moments (12 bytes a parameter) while the
// gradients of the groups before it (4 bytes a parameter) are already freed.
// Under bf16 full fine-tuning a group's update is three programs (xla
// applySplitGroup): the new moments (8 bytes a parameter) beside the old, which
// are freed with the gradients before the new weights and remainders (4) are made,
// so a group holds 8 bytes a parameter at most.
func updateTransient(c *data.ModelConfig, lora, bf16 bool) int64 {
	d, inter, L := int64(c.HiddenSize), int64(c.IntermediateSize), int64(c.NumHiddenLayers)
	q, kvd := int64(c.NumAttentionHeads*c.HeadDim), int64(c.NumKeyValueHeads*c.HeadDim)
	var sizes []int64
	if lora {
		for range L {
			sizes = append(sizes, LoRARank*(2*(d+q)+2*(d+kvd)+3*(d+inter)))
		}
	} else {
		layer := d*q + 2*d*kvd + q*d + 3*d*inter + 2*d
		if c.QKNorm() {
			layer += 2 * int64(c.HeadDim)
		}
		for range L {
			sizes = append(sizes, layer)
		}
		sizes = append(sizes, d, int64(c.VocabSize)*d)
		if !c.TieWordEmbeddings {
			sizes = append(sizes, int64(c.VocabSize)*d)
		}
	}
	slices.Sort(sizes)
	out := int64(12)
	if bf16 && !lora {
		out = 8
	}
	var peak, freed int64
	for _, g := range sizes {
		peak = max(peak, out*g-freed)
		freed += 4 * g
	}
	return peak
}

// halve halves chunk (down to 16) while chunk × width exceeds budget elements.
func halve(chunk, width int64, budget int) int64 {
	for chunk > 16 && chunk*width > int64(budget) {
		chunk /= 2
	}
	return chunk
}

// FitRow is one (model, T) of the H200 fit table.
type FitRow struct {
	Preset   string `json:"preset"`
	T        int    `json:"T"`
	Full     int64  `json:"full_adamw_bytes"`
	LoRA     int64  `json:"lora_bytes"`
	Verdict  string `json:"verdict"` // "full AdamW", "LoRA", "neither"
	Capacity int64  `json:"capacity_bytes"`
}

// FitTable says which (preset, T) fit one H200 with full AdamW (truncated
// backprop, training chunk 256) and where LoRA would be needed.
func FitTable(presets []string, Ts []int) ([]FitRow, error) {
	var rows []FitRow
	for _, p := range presets {
		c, err := data.PresetConfig(p, tokenizer.BytesVocabSize)
		if err != nil {
			return nil, fmt.Errorf("fit table: %w", err)
		}
		for _, T := range Ts {
			full := EstimateMemory(c, T, xla.DefaultChunkTrain, false, false).Total()
			lora := EstimateMemory(c, T, xla.DefaultChunkTrain, true, false).Total()
			v := "neither"
			switch {
			case full <= H200Bytes:
				v = "full AdamW"
			case lora <= H200Bytes:
				v = "LoRA"
			}
			rows = append(rows, FitRow{Preset: p, T: T, Full: full, LoRA: lora, Verdict: v, Capacity: H200Bytes})
		}
	}
	return rows, nil
}

// WriteFitTable prints rows as a Markdown table.
func WriteFitTable(w io.Writer, rows []FitRow) {
	fmt.Fprintln(w, "| model | T | full AdamW | LoRA r16 | on one H200 (139 GiB) |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | --- |")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s |\n", r.Preset, r.T, gib(r.Full), gib(r.LoRA), r.Verdict)
	}
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// stageMemory compares the memory model with the long stage's measured peaks
// (the device peak against the whole estimate where nvidia-smi measured it, else
// peak RSS above the RSS before the warm pass against the transient part) and
// records the H200 fit table.
func (b *bench) stageMemory(ctx context.Context) error {
	_, mc, err := b.model(b.opts.Long)
	if err != nil {
		return err
	}
	for _, mp := range b.measured {
		e := EstimateMemory(mc, mp.T, mp.chunk, false, mp.backprop == xla.BackpropExact)
		// On the GPU the device's high-water mark holds everything; on the CPU the
		// pass ran warm, so the RSS above the baseline is its transient memory.
		pred, src, got := e.Transient(mp.train), "peak RSS − RSS before (warm pass: transient only)", mp.rss-mp.baseline
		if mp.gpu >= 0 {
			pred, src, got = e.ScoreTotal(), "device peak (nvidia-smi)", mp.gpu
			if mp.train {
				pred = e.Total()
			}
		}
		b.record("memory model vs measured", map[string]any{"what": mp.what, "T": mp.T, "chunk": mp.chunk,
			"backprop": string(mp.backprop), "predicted_bytes": pred, "measured_bytes": got, "measured": src,
			"measured_over_predicted": float64(got) / float64(pred), "estimate": e})
	}
	rows, err := FitTable([]string{"qwen3-0.6b", "qwen3-1.7b"}, []int{8192, 32768, 131072})
	if err != nil {
		return err
	}
	var sb strings.Builder
	WriteFitTable(&sb, rows)
	b.record("H200 fit table", map[string]any{"rows": rows, "markdown": sb.String()})
	lrows, err := LoRATable(LoRAModels, []int{8192, 32768, 131072})
	if err != nil {
		return err
	}
	sb.Reset()
	WriteLoRATable(&sb, lrows)
	b.record("LoRA table", map[string]any{"rows": lrows, "markdown": sb.String()})
	prows, err := PrecisionTable(LoRAModels, []int{32768, 131072})
	if err != nil {
		return err
	}
	sb.Reset()
	WritePrecisionTable(&sb, prows)
	b.record("precision table", map[string]any{"rows": prows, "markdown": sb.String()})
	return nil
}
