package gpubench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// stageSpeed times, per preset and T, hindsight's scoring pass and one training
// step (truncated backprop, full AdamW) on one T-token rollout in each of
// Options.Precisions (f32, bf16), with FLOPs counted (ForwardFLOPs, TrainFLOPs) and
// MFU against the peaks of the peak stage; then the PyTorch peers (eager,
// torch.compile) per dtype on the same weights and device, each compared with
// hindsight at the matching precision (float32 with f32, bfloat16 with bf16).
func (b *bench) stageSpeed(ctx context.Context) error {
	var errs []error
	for _, T := range b.opts.SpeedT { // every model at the shorter T first
		for _, preset := range b.opts.Speed {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := b.speed(ctx, preset, T); err != nil {
				errs = append(errs, fmt.Errorf("%s T=%d: %w", preset, T, err))
				b.record("speed failed", map[string]any{"preset": preset, "T": T, "error": err.Error()})
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("speed: %v", errs)
	}
	return nil
}

// mfu fills flops/s and MFU fields for flops done in sec.
func (b *bench) mfu(f map[string]any, flops, sec float64) {
	f["flops"] = flops
	f["flops_per_s"] = flops / sec
	if b.xlaPeak > 0 {
		f["mfu_vs_xla_f32_peak"] = flops / sec / b.xlaPeak
	}
	if b.torchBF16Peak > 0 {
		f["mfu_vs_torch_bf16_peak"] = flops / sec / b.torchBF16Peak
	}
}

func (b *bench) speed(ctx context.Context, preset string, T int) error {
	dir, mc, err := b.model(preset)
	if err != nil {
		return err
	}
	tokens := benchutil.Tokens(T, mc.VocabSize, 7, 8)
	// hindsight's tokens/s by the PyTorch dtype it is compared with.
	goScore, goTrain := map[string]float64{}, map[string]float64{}
	precisions := b.opts.Precisions
	if len(precisions) == 0 {
		precisions = []string{string(xla.PrecisionF32)}
	}
	for _, p := range precisions {
		if err := ctx.Err(); err != nil {
			return err
		}
		sc, tr, err := b.speedAs(ctx, preset, dir, mc, tokens, xla.Precision(p))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		goScore[torchDType(p)], goTrain[torchDType(p)] = sc, tr
	}

	for _, dt := range b.opts.PeerTypes {
		out, err := b.peer(ctx, "speed", "--model", dir, "--T", strconv.Itoa(T), "--dtype", dt, "--device", b.opts.Device,
			"--modes", "eager,compile", "--reps", strconv.Itoa(b.opts.Reps))
		if err != nil {
			b.record("torch speed skipped", map[string]any{"preset": preset, "T": T, "dtype": dt, "reason": err.Error()})
			continue
		}
		out["preset"] = preset
		for _, mode := range []string{"eager", "compile"} {
			r, _ := out[mode].(map[string]any)
			if st, ok := r["score_tps"].(float64); ok {
				if gs, ok := goScore[dt]; ok {
					r["hindsight_over_torch_score"] = gs / st
				}
				b.mfuTorch(r, mc, T, st, r["train_tps"])
			}
			if tt, ok := r["train_tps"].(float64); ok {
				if gt, ok := goTrain[dt]; ok {
					r["hindsight_over_torch_train"] = gt / tt
				}
			}
		}
		b.record("torch speed", out)
	}
	return nil
}

// torchDType is PyTorch's name of a model.precision: float32, bfloat16.
func torchDType(p string) string {
	if p == string(xla.PrecisionBF16) {
		return "bfloat16"
	}
	return "float32"
}

// speedAs times hindsight's scoring pass and one training step of the model in dir
// at precision p on tokens, records both, and returns their tokens/s.
func (b *bench) speedAs(ctx context.Context, preset, dir string, mc *data.ModelConfig, tokens []int32, p xla.Precision) (score, train float64, err error) {
	if err := p.CheckBackend(b.backend); err != nil {
		return 0, 0, err
	}
	T := len(tokens)
	m, err := xla.Open(dir, xla.OpenOptions{Precision: p})
	if err != nil {
		return 0, 0, err
	}
	s, err := xla.NewScorer(b.backend, m, xla.ScorerOptions{})
	if err != nil {
		return 0, 0, err
	}
	b.mem.reset()
	s.ResetStats()
	sec, first, err := bestOf(ctx, b.opts.Reps, func() error {
		_, c, err := s.Score(ctx, tokens)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("score: %w", err)
	}
	dtype := torchDType(string(p))
	f := map[string]any{"preset": preset, "T": T, "tokens_per_s": float64(T) / sec, "seconds": sec,
		"first_seconds_with_compile": first, "chunk": s.Chunk(), "dtype": dtype}
	b.mfu(f, ForwardFLOPs(mc, T), sec)
	for k, v := range b.mem.peaks() {
		f[k] = v
	}
	// The breakdown: compiles (all in the first pass), and execute and copy
	// seconds per pass averaged over the 1 + reps passes.
	for k, v := range statsFields(s.Stats(), 1+b.opts.Reps) {
		f[k] = v
	}
	b.record("hindsight score", f)
	score = float64(T) / sec

	tr, err := xla.NewTrainer(b.backend, m, trainerOptions(0, xla.BackpropTruncated))
	if err != nil {
		return 0, 0, err
	}
	r := trainRollout(tokens)
	b.mem.reset()
	var met xla.Metrics
	sec, first, err = bestOf(ctx, b.opts.Reps, func() error {
		met, err = tr.Step(ctx, []credit.Sequence{r})
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("train step: %w", err)
	}
	if !met.Updated || met.Tokens == 0 {
		return 0, 0, fmt.Errorf("train step: no update (%d gradient tokens): the time would not include a gradient pass", met.Tokens)
	}
	f = map[string]any{"preset": preset, "T": T, "tokens_per_s": float64(T) / sec, "seconds": sec,
		"first_seconds_with_compile": first, "chunk": xla.DefaultChunkTrain, "backprop": "truncated", "optimizer": "adamw",
		"dtype": dtype, "updated": met.Updated, "gradient_tokens": met.Tokens}
	if p == xla.PrecisionBF16 {
		f["optimizer"] = "adamw, float32 masters"
	}
	b.mfu(f, TrainFLOPs(mc, T), sec)
	for k, v := range b.mem.peaks() {
		f[k] = v
	}
	b.record("hindsight train step", f)
	return score, float64(T) / sec, nil
}

// mfuTorch adds PyTorch's MFU (forward, and 3 forwards per training step) against
// the same bf16 peak.
func (b *bench) mfuTorch(r map[string]any, mc *data.ModelConfig, T int, scoreTPS float64, trainTPS any) {
	if b.torchBF16Peak <= 0 {
		return
	}
	r["score_mfu_vs_torch_bf16_peak"] = ForwardFLOPs(mc, T) * scoreTPS / float64(T) / b.torchBF16Peak
	if tt, ok := trainTPS.(float64); ok {
		r["train_mfu_vs_torch_bf16_peak"] = 3 * ForwardFLOPs(mc, T) * tt / float64(T) / b.torchBF16Peak
	}
}

// trainerOptions are the default credit (no baseline, so that one rollout's reward
// is its advantage and every step updates) and AdamW at a training chunk (0: the
// default) and backprop mode.
func trainerOptions(chunk int, mode xla.Backprop) xla.TrainerOptions {
	c := credit.DefaultConfig()
	c.Baseline = credit.BaselineNone
	return xla.TrainerOptions{Chunk: chunk, Backprop: mode, Credit: c, Optimizer: xla.DefaultAdamW()}
}

// trainRollout is a rollout of tokens with every position after the first
// trainable, sampled at log-prob −2, reward 1.
func trainRollout(tokens []int32) credit.Sequence {
	T := len(tokens)
	r := credit.Sequence{ID: "bench", TaskID: "bench", Tokens: tokens, Sampler: make([]float64, T), Trainable: make([]bool, T),
		Reward: 1, HasReward: true}
	for t := range T {
		r.Trainable[t], r.Sampler[t] = t > 0, -2
	}
	r.Sampler[0] = math.NaN()
	return r
}

// bestOf runs fn once to compile (first, seconds) and then reps times, returning the
// best time.
func bestOf(ctx context.Context, reps int, fn func() error) (best, first float64, err error) {
	t0 := time.Now()
	if err := fn(); err != nil {
		return 0, 0, err
	}
	first, best = time.Since(t0).Seconds(), math.Inf(1)
	for range reps {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		t0 := time.Now()
		if err := fn(); err != nil {
			return 0, 0, err
		}
		best = min(best, time.Since(t0).Seconds())
	}
	return best, first, nil
}
