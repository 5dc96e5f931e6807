package gpubench

import "github.com/hindsight-ai/hindsight/data"

// ForwardFLOPs counts the multiply-adds (×2) of one causal forward pass over T
// tokens of c: the projections and MLP (2 × non-embedding matmul parameters per
// token), causal attention (QKᵀ and PV over T²/2 pairs per head) and the output
// head over the vocabulary. Norms, RoPE and softmax are left out (< 1%).
func ForwardFLOPs(c *data.ModelConfig, T int) float64 {
	d, hd := float64(c.HiddenSize), float64(c.HeadDim)
	q, kv := float64(c.NumAttentionHeads)*hd, float64(c.NumKeyValueHeads)*hd
	perLayer := d*q + 2*d*kv + q*d + 3*d*float64(c.IntermediateSize)
	t := float64(T)
	dense := 2 * t * perLayer * float64(c.NumHiddenLayers)
	attn := 2 * 2 * float64(c.NumAttentionHeads) * hd * t * t / 2 * float64(c.NumHiddenLayers)
	head := 2 * t * d * float64(c.VocabSize)
	return dense + attn + head
}

// TrainFLOPs counts one training step of hindsight on one T-token rollout: the
// scoring pass (a forward) plus the gradient pass (a forward and a backward, the
// backward twice the forward): 4 forwards. (PyTorch's step has no separate scoring
// pass: 3 forwards; its MFU uses that.)
func TrainFLOPs(c *data.ModelConfig, T int) float64 { return 4 * ForwardFLOPs(c, T) }
