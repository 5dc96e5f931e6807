package credit

import (
	"fmt"
	"math"
)

// Hint is one hinted segment of a rollout, under the names teacher.Hint and
// creditfile.Hint give the same values: the hint's Tokens h (already wrapped in the
// model's hint template) inserted before position InsertAt (the start of the policy
// turn), and the rollout's tokens [InsertAt, End) re-scored after them. The trainer
// reads Tokens and Empty and fills Teacher and EmptyTeacher (the teacher passes);
// credit reads the last two.
type Hint struct {
	InsertAt, End int       // half-open token range of the rollout re-scored after the hint
	Tokens        []int32   // h; may be empty (then q_t is the plain s_t recomputed)
	Empty         []int32   // the same template with an empty hint, scored for base empty_hint
	Teacher       []float64 // q_t(h) for t in [InsertAt, End), nats
	EmptyTeacher  []float64 // q_t(∅) for the same positions; required when Base is empty_hint
}

// Sequence is one rollout at the token level (rollout.Rollout is the file's row):
// the one shape the trainer (xla) and the credit math share. The adapter (train.ToTrainer) fills the rollout's own fields;
// the trainer's scoring passes fill Student, Ref and each hint's Teacher and
// EmptyTeacher on its own copy. Slices indexed by token position have the rollout's
// length T; credit reads only trainable positions.
type Sequence struct {
	ID        string
	TaskID    string    // outcome baseline group; empty means a group of its own
	Tokens    []int32   // y, what the trainer scores (credit does not read them)
	Student   []float64 // s_t = log π(y_t | y_<t), nats
	Sampler   []float64 // μ_t, the sampler's log-prob; NaN where null (not sampled)
	Trainable []bool    // m_t (docs/design.md: policy segment and non-null log-prob)
	Reward    float64   // outcome reward; used when HasReward
	HasReward bool
	Ref       []float64 // log π_ref(y_t | y_<t) for the KL penalty; nil when KLBeta is 0
	Hints     []Hint
	// Temperature is the sampling temperature the rollout is scored at (Temp; 0
	// means 1): every log-prob above (Student, Ref, each hint's Teacher and
	// EmptyTeacher) and the distributions of modes topk and full are the policy's with
	// its logits divided by it, as the SDPO authors and TRL compute them
	// (docs/distillation.md "The sampling temperature"). The math here reads only
	// those log-probs; the reference entry points that take logits (DistillPosition,
	// SampledTokenPosition, SelectTopK) take them tempered (Tempered).
	Temperature float64
}

// Temp returns the temperature r is scored at: Temperature, or 1 when it is 0.
func (r *Sequence) Temp() float64 {
	if r.Temperature == 0 {
		return 1
	}
	return r.Temperature
}

// Result is the credit of one rollout. Per-token slices have length T.
type Result struct {
	AOut  float64   // outcome advantage (reward units), the same for every trainable token
	Delta []float64 // Δ_t of the first span covering t; NaN outside every span
	AHint []float64 // gated hint advantage (nats); 0 outside spans
	// Adv is A_t = λ_out·A_out + λ·A_hint,t, λ being λ_hint (normalize budget) or
	// λ_distill (separate); 0 where not trainable. In modes topk and full the hint is
	// not in it (the divergence is its own term): A_t = λ_out·A_out.
	Adv []float64
	Rho []float64 // ρ_t = min(exp(s_t − μ_t), ρ_max); 1 where μ is missing; 0 where not trainable
	// Weight is m_t·ρ_t·A_t / N under normalize budget; under separate the outcome
	// part is over N_out and the hint part over N_distill. The loss is
	// −Σ_t Weight_t·log π_θ(y_t | y_<t) (plus the distillation and KL terms), with ρ
	// and A held constant.
	Weight []float64
	// WeightOut is the outcome part of Weight (the rest is the sampled-token hint).
	WeightOut []float64
	// DistillWeight is the coefficient of the divergence D_t (DistillPosition) in the
	// loss, modes topk and full: λ/N or λ_distill/N_distill at trainable tokens inside a
	// teacher span, else 0 (all 0 in mode sampled_token).
	DistillWeight []float64
	// DistillIS is the importance weight on D_t (modes topk and full, at positions
	// DistillWeight covers; else 0): min(exp(s_t − μ_t), distill.is_cap), the log
	// ratio first clamped to [−20, 20] as the SDPO authors and TRL do; 1 where μ is
	// missing or is_cap is 0. DistillWeight includes it.
	DistillIS []float64
	// NoSampler is true when the rollout has no sampler log-prob at all; Skipped when
	// it was therefore left out (Config.AllowNoSampler false): its weights are 0.
	NoSampler, Skipped bool
}

// Step computes the credit of every rollout of one optimizer step. budget is N, the
// step's token budget, the denominator of the loss. Outcome advantages are
// leave-one-out within each task group of the step; a rollout alone in its group is
// compared with the running mean in b (per task, else global), and b is then updated
// with the step's rewards, in rollout order.
func Step(cfg Config, rs []Sequence, b *Baselines, budget int) ([]Result, Stats, error) {
	if err := cfg.Validate(); err != nil {
		return nil, Stats{}, fmt.Errorf("credit config: %w", err)
	}
	if budget <= 0 {
		return nil, Stats{}, fmt.Errorf("credit step: token budget %d must be positive", budget)
	}
	for i := range rs {
		if err := check(cfg, &rs[i]); err != nil {
			return nil, Stats{}, err
		}
	}
	aout := outcomeAdvantages(rs, b)
	if cfg.Baseline == BaselineNone {
		for i := range rs {
			aout[i] = 0
			if rs[i].HasReward {
				aout[i] = rs[i].Reward
			}
		}
	}
	nm := stepNorms(cfg, rs, budget)
	out := make([]Result, len(rs))
	for i := range rs {
		out[i] = rolloutCredit(cfg, &rs[i], aout[i], nm)
	}
	b.update(cfg.BaselineRate, rs)
	return out, summarize(cfg, rs, out, nm), nil
}

// norms are the denominators and weights of one step's loss terms: every term over N
// (budget), or the outcome term over N_out and the distillation term over N_distill
// (separate). A count of 0 leaves its term out.
type norms struct {
	out, distill   float64 // denominators
	lambdaH        float64 // λ_hint or λ_distill
	nOut, nDistill int     // the token counts (for Stats)
}

// stepNorms counts the step's outcome and distillation tokens: trainable tokens of
// rollouts that train (not skipped for missing sampler log-probs), with a reward, and
// inside at least one teacher span.
func stepNorms(cfg Config, rs []Sequence, budget int) norms {
	nm := norms{out: float64(budget), distill: float64(budget), lambdaH: cfg.LambdaHint}
	for i := range rs {
		r := &rs[i]
		if !anyFinite(r.Sampler, r.Trainable) && !cfg.AllowNoSampler {
			continue
		}
		covered := make([]bool, len(r.Trainable))
		for _, h := range r.Hints {
			for t := h.InsertAt; t < h.End; t++ {
				covered[t] = true
			}
		}
		for t, m := range r.Trainable {
			if !m {
				continue
			}
			if r.HasReward {
				nm.nOut++
			}
			if covered[t] {
				nm.nDistill++
			}
		}
	}
	if cfg.Normalize == NormalizeSeparate {
		nm.out, nm.distill, nm.lambdaH = float64(nm.nOut), float64(nm.nDistill), cfg.LambdaDistill
	}
	return nm
}

// rolloutCredit computes one rollout's per-token credit.
func rolloutCredit(cfg Config, r *Sequence, aout float64, nm norms) Result {
	T := len(r.Student)
	res := Result{AOut: aout, Delta: make([]float64, T), AHint: make([]float64, T), Adv: make([]float64, T),
		Rho: make([]float64, T), Weight: make([]float64, T), WeightOut: make([]float64, T), DistillWeight: make([]float64, T),
		DistillIS: make([]float64, T)}
	// One rule for overlapping spans, here and in the divergence term (the device's
	// distillTerms, the credit files, the viewer): a position's teacher is the first
	// span that covers it.
	cover := make([]int, T)
	for t := range res.Delta {
		res.Delta[t] = math.NaN()
	}
	for _, h := range r.Hints {
		for t := h.InsertAt; t < h.End; t++ {
			if !r.Trainable[t] || cover[t] > 0 {
				continue
			}
			base := r.Student[t]
			if cfg.Base == BaseEmptyHint {
				base = h.EmptyTeacher[t-h.InsertAt]
			}
			d := h.Teacher[t-h.InsertAt] - base
			cover[t]++
			res.Delta[t] = d
			res.AHint[t] = gate(cfg, d)
		}
	}
	res.NoSampler = !anyFinite(r.Sampler, r.Trainable)
	res.Skipped = res.NoSampler && !cfg.AllowNoSampler
	if res.Skipped {
		return res
	}
	for t := 0; t < T; t++ {
		if !r.Trainable[t] {
			continue
		}
		rho := 1.0
		if mu := r.Sampler[t]; !math.IsNaN(mu) {
			rho = math.Min(math.Exp(r.Student[t]-mu), cfg.RhoMax)
		}
		res.Rho[t] = rho
		if r.HasReward && nm.out > 0 {
			res.WeightOut[t] = rho * (cfg.LambdaOut * aout) / nm.out // as docs/design.md's loss always computed it
		}
		res.Adv[t] = cfg.LambdaOut * aout
		res.Weight[t] = res.WeightOut[t]
		if cover[t] == 0 || nm.distill == 0 {
			continue
		}
		switch {
		case cfg.Distill.Mode != DistillSampledToken:
			res.DistillIS[t] = distillIS(cfg.Distill.ISCap, r.Student[t], r.Sampler[t])
			res.DistillWeight[t] = res.DistillIS[t] * nm.lambdaH / nm.distill
		case cfg.Normalize == NormalizeSeparate:
			res.Adv[t] += nm.lambdaH * res.AHint[t]
			res.Weight[t] += rho * nm.lambdaH * res.AHint[t] / nm.distill
		default:
			// docs/design.md's loss, computed as it always was (bit for bit: runs compare).
			res.Adv[t] += nm.lambdaH * res.AHint[t]
			res.Weight[t] = rho * res.Adv[t] / nm.out
		}
	}
	return res
}

// distillIS is the truncated importance weight of the divergence term at one token:
// min(exp(clamp(s − μ, −20, 20)), cap) (the SDPO authors' is_clip, TRL's
// apply_importance_sampling_clipping); 1 without a sampler log-prob or with cap 0.
func distillIS(cap, s, mu float64) float64 {
	if cap == 0 || math.IsNaN(mu) {
		return 1
	}
	return math.Min(math.Exp(math.Max(-20, math.Min(20, s-mu))), cap)
}

// gate bounds Δ into the hint advantage: clip(Δ, −c, c) or c·tanh(Δ/c).
func gate(cfg Config, d float64) float64 {
	c := cfg.Clip
	if cfg.Gate == GateTanh {
		return c * math.Tanh(d/c)
	}
	return math.Max(-c, math.Min(c, d))
}

func anyFinite(xs []float64, mask []bool) bool {
	for t, x := range xs {
		if mask[t] && !math.IsNaN(x) {
			return true
		}
	}
	return false
}

// Loss is the float64 reference of the device loss for one step, given the policy's
// log-probs logp[i][t] of rollout i's tokens (and, with KLBeta > 0, rs[i].Ref):
//
//	loss = −Σ_i Σ_t Weight_t·logp_t + (β/N)·Σ_i Σ_t m_t·k3_t,  k3 = exp(r−l) − (r−l) − 1
//
// where k3 is the non-negative, unbiased per-token estimator of KL(π_θ‖π_ref) on
// tokens sampled from π_θ (l = logp_t, r = Ref_t). The divergence term of modes topk
// and full needs the divergences: LossTerms.
func Loss(cfg Config, rs []Sequence, res []Result, logp [][]float64, budget int) float64 {
	var loss float64
	for i := range res {
		for t, w := range res[i].Weight {
			if w != 0 {
				loss -= w * logp[i][t]
			}
		}
	}
	return loss + klTerm(cfg, rs, res, logp, budget)
}

// klTerm is (β/N)·Σ_i Σ_t m_t·k3_t over the rollouts that train.
func klTerm(cfg Config, rs []Sequence, res []Result, logp [][]float64, budget int) float64 {
	var kl float64
	if cfg.KLBeta == 0 {
		return 0
	}
	for i := range res {
		if res[i].Skipped {
			continue
		}
		for t, m := range rs[i].Trainable {
			if m {
				x := rs[i].Ref[t] - logp[i][t]
				kl += cfg.KLBeta / float64(budget) * (math.Exp(x) - x - 1)
			}
		}
	}
	return kl
}

// Terms are the values of the loss's terms for one step (float64 reference).
type Terms struct {
	// Out is −Σ WeightOut_t·log π_θ(y_t), the outcome policy-gradient term.
	Out float64
	// Distill is the distillation term: −Σ (Weight_t − WeightOut_t)·log π_θ(y_t) in
	// mode sampled_token, Σ DistillWeight_t·D_t in modes topk and full.
	Distill float64
	// KL is the β-weighted KL(π_θ‖π_ref) penalty.
	KL float64
}

// Total is the loss: Out + Distill + KL.
func (t Terms) Total() float64 { return t.Out + t.Distill + t.KL }

// LossTerms is Loss split into its terms. div[i][t] is D_t of rollout i (the divergence
// of DistillPosition at the positions DistillWeight covers); nil in mode sampled_token.
func LossTerms(cfg Config, rs []Sequence, res []Result, logp, div [][]float64, budget int) Terms {
	var tm Terms
	for i := range res {
		for t, w := range res[i].Weight {
			wo := valueOr(res[i].WeightOut, t)
			if wo != 0 {
				tm.Out -= wo * logp[i][t]
			}
			if w != wo {
				tm.Distill -= (w - wo) * logp[i][t]
			}
			if dw := valueOr(res[i].DistillWeight, t); dw != 0 {
				tm.Distill += dw * div[i][t]
			}
		}
	}
	tm.KL = klTerm(cfg, rs, res, logp, budget)
	return tm
}

// check validates one rollout's inputs and names the rollout, field and position.
func check(cfg Config, r *Sequence) error {
	T := len(r.Student)
	bad := func(format string, a ...any) error {
		return fmt.Errorf("credit rollout %q: %s", r.ID, fmt.Sprintf(format, a...))
	}
	if len(r.Sampler) != T || len(r.Trainable) != T {
		return bad("student has %d tokens, sampler %d, trainable %d", T, len(r.Sampler), len(r.Trainable))
	}
	if cfg.KLBeta > 0 && len(r.Ref) != T {
		return bad("kl_beta > 0 needs ref log-probs for all %d tokens, got %d", T, len(r.Ref))
	}
	if r.HasReward && (math.IsNaN(r.Reward) || math.IsInf(r.Reward, 0)) {
		return bad("reward %v is not finite", r.Reward)
	}
	if t := r.Temperature; math.IsNaN(t) || math.IsInf(t, 0) || t < 0 {
		return bad("temperature %v is not a finite value ≥ 0", t)
	}
	for t := 0; t < T; t++ {
		if !r.Trainable[t] {
			continue
		}
		if !finiteLogProb(r.Student[t]) {
			return bad("student[%d] = %v is not a log-prob", t, r.Student[t])
		}
		if mu := r.Sampler[t]; !math.IsNaN(mu) && !finiteLogProb(mu) {
			return bad("sampler[%d] = %v is not a log-prob", t, mu)
		}
		if cfg.KLBeta > 0 && !finiteLogProb(r.Ref[t]) {
			return bad("ref[%d] = %v is not a log-prob", t, r.Ref[t])
		}
	}
	for k, h := range r.Hints {
		if h.InsertAt < 0 || h.End > T || h.InsertAt >= h.End {
			return bad("hint %d: span [%d, %d) outside [0, %d) or empty", k, h.InsertAt, h.End, T)
		}
		if len(h.Teacher) != h.End-h.InsertAt {
			return bad("hint %d: %d teacher log-probs for span [%d, %d)", k, len(h.Teacher), h.InsertAt, h.End)
		}
		if cfg.Base == BaseEmptyHint && len(h.EmptyTeacher) != h.End-h.InsertAt {
			return bad("hint %d: base empty_hint needs %d empty-hint log-probs, got %d", k, h.End-h.InsertAt, len(h.EmptyTeacher))
		}
		for t := h.InsertAt; t < h.End; t++ {
			if !r.Trainable[t] {
				continue
			}
			if !finiteLogProb(h.Teacher[t-h.InsertAt]) {
				return bad("hint %d: teacher[%d] = %v is not a log-prob", k, t, h.Teacher[t-h.InsertAt])
			}
			if cfg.Base == BaseEmptyHint && !finiteLogProb(h.EmptyTeacher[t-h.InsertAt]) {
				return bad("hint %d: empty_hint[%d] = %v is not a log-prob", k, t, h.EmptyTeacher[t-h.InsertAt])
			}
		}
	}
	return nil
}

// finiteLogProb allows a little positive rounding error (device log-softmax can give
// +1e-7 for a certain token) but nothing else above 0.
func finiteLogProb(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) && x <= 1e-4 }
