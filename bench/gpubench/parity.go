package gpubench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// ParityF32Tol is the largest per-token |Δ log-prob| accepted between hindsight and
// PyTorch in f32 with TF32 off on both sides.
const ParityF32Tol = 1e-4

// stageParity compares per-token log-probs per preset: hindsight (f32) against
// PyTorch f32 (TF32 off; pass when max |Δ| ≤ ParityF32Tol) and PyTorch bf16 (max
// and mean |Δ|: bf16 rounding, reported, not judged); and hinted scoring with the
// prefix's KV cache reused against one from-scratch pass over the spliced sequence.
// With bf16 in Options.Precisions, hindsight's bf16 log-probs (model.precision bf16)
// are compared with its f32 ones and with both PyTorch dtypes too (reported).
func (b *bench) stageParity(ctx context.Context) error {
	var errs []error
	for _, preset := range b.opts.Parity {
		if err := b.parity(ctx, preset); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", preset, err))
			b.record("parity failed", map[string]any{"preset": preset, "error": err.Error()})
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("parity: %v", errs)
	}
	return nil
}

func (b *bench) parity(ctx context.Context, preset string) error {
	dir, mc, err := b.model(preset)
	if err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	s, err := xla.NewScorer(b.backend, m, xla.ScorerOptions{})
	if err != nil {
		return err
	}
	T := b.opts.ParityT
	tokens := benchutil.Tokens(T, mc.VocabSize, 1, 2)
	lp, cache, err := s.Score(ctx, tokens)
	if err != nil {
		return err
	}
	defer cache.Close()

	// Hinted: segment [a, e) after a 16-token hint, prefix cache reused, against
	// the plain Score of y_<a · h · y_a…y_<e.
	a, e := T/2, T/2+T/4
	hint := benchutil.Tokens(16, mc.VocabSize, 5, 6)
	q, err := s.ScoreHinted(ctx, tokens, cache, []credit.Hint{{InsertAt: a, End: e, Tokens: hint}})
	if err != nil {
		return fmt.Errorf("hinted: %w", err)
	}
	spliced := slices.Concat(tokens[:a], hint, tokens[a:e])
	ref, c2, err := s.Score(ctx, spliced)
	if err != nil {
		return fmt.Errorf("spliced: %w", err)
	}
	c2.Close()
	hmax, hmean := diff(q[0], ref[len(ref)-(e-a):])
	b.record("hinted prefix reuse vs spliced", map[string]any{"preset": preset, "T": T, "segment": []int{a, e},
		"hint": len(hint), "max_abs": hmax, "mean_abs": hmean, "pass": hmax <= ParityF32Tol})

	ours := map[string][]float32{"float32": lp[1:]}
	if slices.Contains(b.opts.Precisions, string(xla.PrecisionBF16)) {
		lpB, err := b.scoreAs(ctx, dir, xla.PrecisionBF16, tokens)
		if err != nil {
			return fmt.Errorf("bf16: %w", err)
		}
		mx, mean := diff(lpB[1:], lp[1:])
		b.record("hindsight bf16 vs f32", map[string]any{"preset": preset, "T": T, "max_abs": mx, "mean_abs": mean})
		ours["bfloat16"] = lpB[1:]
	}

	tokPath := filepath.Join(b.opts.Out, "parity-tokens-"+preset+".json")
	raw, _ := json.Marshal(tokens)
	if err := os.WriteFile(tokPath, raw, 0o644); err != nil {
		return err
	}
	defer os.Remove(tokPath)
	for _, dt := range []string{"float32", "bfloat16"} {
		out, err := b.peer(ctx, "logprobs", "--model", dir, "--tokens", tokPath, "--dtype", dt, "--device", b.opts.Device)
		if err != nil {
			b.record("torch log-probs skipped", map[string]any{"preset": preset, "dtype": dt, "reason": err.Error()})
			continue
		}
		tl, _ := out["logprobs"].([]any)
		if len(tl) != T-1 {
			return fmt.Errorf("torch %s log-probs: %d values, want %d", dt, len(tl), T-1)
		}
		want := make([]float32, T-1)
		for i, v := range tl {
			f, _ := v.(float64)
			want[i] = float32(f)
		}
		for _, hd := range []string{"float32", "bfloat16"} {
			got, ok := ours[hd]
			if !ok {
				continue
			}
			mx, mean := diff(got, want)
			f := map[string]any{"preset": preset, "T": T, "torch_dtype": dt, "hindsight_dtype": hd,
				"max_abs": mx, "mean_abs": mean, "torch_path": out["path"], "tf32": false}
			if dt == "float32" && hd == "float32" {
				f["pass"] = mx <= ParityF32Tol
				f["tol"] = ParityF32Tol
			}
			b.record("log-probs vs torch", f)
		}
	}
	return nil
}

// scoreAs opens the model directory dir in precision p and scores tokens.
func (b *bench) scoreAs(ctx context.Context, dir string, p xla.Precision, tokens []int32) ([]float32, error) {
	if err := p.CheckBackend(b.backend); err != nil {
		return nil, err
	}
	m, err := xla.Open(dir, xla.OpenOptions{Precision: p})
	if err != nil {
		return nil, err
	}
	s, err := xla.NewScorer(b.backend, m, xla.ScorerOptions{})
	if err != nil {
		return nil, err
	}
	lp, c, err := s.Score(ctx, tokens)
	if err != nil {
		return nil, err
	}
	c.Close()
	return lp, nil
}

// diff returns max and mean |x−y| (NaN if any value is NaN or the lengths differ).
func diff(x, y []float32) (maxAbs, meanAbs float64) {
	if len(x) != len(y) || len(x) == 0 {
		return math.NaN(), math.NaN()
	}
	for i := range x {
		d := math.Abs(float64(x[i]) - float64(y[i]))
		if math.IsNaN(d) {
			return math.NaN(), math.NaN()
		}
		maxAbs = max(maxAbs, d)
		meanAbs += d
	}
	return maxAbs, meanAbs / float64(len(x))
}
