package credit

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// DistillMode is what the teacher hands the student at each scored position
// (docs/distillation.md "How the view becomes a loss").
type DistillMode string

// The distillation modes.
const (
	// DistillSampledToken: one number per token, the teacher's log-prob of the token the
	// student sampled. Δ_t = q_t − base_t becomes an advantage (today's hint credit;
	// TRL SDPO's default; on-policy distillation's per-token reverse KL estimate).
	DistillSampledToken DistillMode = "sampled_token"
	// DistillTopK: the teacher keeps its k most likely tokens' log-probs plus one tail
	// bucket holding the remaining mass; the loss is a divergence between teacher and
	// student over those k+1 buckets (the SDPO authors' default, k = 100). The right
	// token is raised even when the student did not sample it.
	DistillTopK DistillMode = "topk"
	// DistillFull: the divergence over the whole vocabulary (small vocabularies such as
	// the byte tokenizer's; Tinker's SDFT recipe).
	DistillFull DistillMode = "full"
)

// Divergence is the divergence between teacher P and student Q over the buckets.
type Divergence string

// The divergences.
const (
	// DivReverseKL is KL(Q‖P) = Σ q (log q − log p): mode seeking, what on-policy
	// distillation optimises (the default).
	DivReverseKL Divergence = "reverse_kl"
	// DivForwardKL is KL(P‖Q) = Σ p (log p − log q): mass covering.
	DivForwardKL Divergence = "forward_kl"
	// DivJSD is the generalised Jensen–Shannon divergence with M = α·P + (1−α)·Q:
	// α·KL(P‖M) + (1−α)·KL(Q‖M); α = 0.5 is the symmetric JSD (SDPO's choice). It is
	// bounded by log 2 per position at α = 0.5 whatever the teacher says.
	DivJSD Divergence = "jsd"
)

// ClipScope is what DistillConfig.Clip bounds.
type ClipScope string

// The clip scopes.
const (
	// ClipEntry bounds each bucket's point-wise contribution to a position's divergence
	// (min(φ_b, c), summed over buckets): OPSD's jsd_token_clip (0.05 in its scripts).
	// Style tokens carry 6–15× the divergence of content tokens; this keeps them from
	// carrying the update.
	ClipEntry ClipScope = "entry"
	// ClipToken bounds a position's whole divergence: min(D_t, c). A clipped position
	// gives no gradient.
	ClipToken ClipScope = "token"
)

// DistillConfig is `credit.distill`: how the teacher's view becomes a loss.
type DistillConfig struct {
	// Mode is sampled_token (default), topk or full.
	Mode DistillMode `yaml:"mode"`
	// TopK is k of mode topk: the teacher's most likely tokens kept per position.
	TopK int `yaml:"top_k"`
	// Divergence is reverse_kl (default), forward_kl or jsd (modes topk and full).
	Divergence Divergence `yaml:"divergence"`
	// JSDAlpha is α of jsd, in (0, 1): the teacher's weight in the mixture.
	JSDAlpha float64 `yaml:"jsd_alpha"`
	// Clip bounds the divergence per position (modes topk and full), in nats; 0 turns it
	// off (the default). ClipScope says what it bounds.
	Clip      float64   `yaml:"clip"`
	ClipScope ClipScope `yaml:"clip_scope"`
}

// DefaultDistillConfig returns the defaults: sampled_token (today's Δ credit); for topk
// k = 100 and for both topk and full reverse KL, JSD α 0.5 when chosen, no clip (scope
// entry when set).
func DefaultDistillConfig() DistillConfig {
	return DistillConfig{Mode: DistillSampledToken, TopK: 100, Divergence: DivReverseKL, JSDAlpha: 0.5, ClipScope: ClipEntry}
}

// Validate names the first bad field under prefix ("distill." inside credit's config).
// Empty fields (a config or checkpoint written before the section) take their
// defaults.
func (c *DistillConfig) Validate(prefix string) error {
	d := DefaultDistillConfig()
	if c.Mode == "" && c.TopK == 0 && c.Divergence == "" && c.JSDAlpha == 0 && c.ClipScope == "" {
		clip := c.Clip
		*c = d
		c.Clip = clip
	}
	if c.ClipScope == "" {
		c.ClipScope = d.ClipScope
	}
	switch c.Mode {
	case DistillSampledToken, DistillTopK, DistillFull:
	default:
		return fmt.Errorf("%smode: %q is not sampled_token, topk or full", prefix, c.Mode)
	}
	if c.TopK < 1 {
		return fmt.Errorf("%stop_k: %d must be at least 1", prefix, c.TopK)
	}
	switch c.Divergence {
	case DivReverseKL, DivForwardKL, DivJSD:
	default:
		return fmt.Errorf("%sdivergence: %q is not reverse_kl, forward_kl or jsd", prefix, c.Divergence)
	}
	if !(c.JSDAlpha > 0 && c.JSDAlpha < 1) {
		return fmt.Errorf("%sjsd_alpha: %v must be in (0, 1) (forward_kl and reverse_kl are the ends)", prefix, c.JSDAlpha)
	}
	if math.IsNaN(c.Clip) || math.IsInf(c.Clip, 0) || c.Clip < 0 {
		return fmt.Errorf("%sclip: %v must be finite and non-negative (0: off)", prefix, c.Clip)
	}
	switch c.ClipScope {
	case ClipEntry, ClipToken:
	default:
		return fmt.Errorf("%sclip_scope: %q is not entry or token", prefix, c.ClipScope)
	}
	return nil
}

// TopK is the teacher's view of one position in mode topk: its k most likely token ids
// with their log-probs (nats, over the whole vocabulary), and Tail, the log of the mass
// of every other id. Tail is −Inf when IDs cover the vocabulary: the tail bucket is
// then empty on both sides and left out.
//
// On the device the teacher pass computes Tail exactly as logsumexp of the other
// logits minus the normaliser; TailLogProb recovers it from the k log-probs alone.
type TopK struct {
	IDs      []int
	LogProbs []float64
	Tail     float64
}

// NewTopK returns the top k of a teacher's full log-prob vector (ties broken by the
// lower id) with its exact tail. k ≥ len(lp) keeps every id and no tail.
func NewTopK(lp []float64, k int) TopK {
	ids := make([]int, len(lp))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(lp[b], lp[a]) })
	k = min(k, len(lp))
	t := TopK{IDs: ids[:k:k], LogProbs: make([]float64, k), Tail: math.Inf(-1)}
	for i, id := range t.IDs {
		t.LogProbs[i] = lp[id]
	}
	if k < len(lp) {
		rest := make([]float64, 0, len(lp)-k)
		for _, id := range ids[k:] {
			rest = append(rest, lp[id])
		}
		t.Tail = logSumExp(rest)
	}
	return t
}

// TailLogProb returns log(1 − Σ exp(lp)), the tail mass of top-k log-probs lp, with the
// sum capped at 1 − 1e-7 so rounding cannot make it −Inf or NaN (a floor of about
// −16 nats).
func TailLogProb(lp []float64) float64 {
	s := math.Min(logSumExp(lp), math.Log1p(-1e-7))
	return math.Log(-math.Expm1(s))
}

// tailFloor is the least teacher tail log-prob used when the student's tail bucket is
// not empty (nats): a teacher whose top k rounded to all of the mass would otherwise
// make the reverse KL infinite.
const tailFloor = -30

// DistillPosition is the float64 reference of one scored position of modes topk and
// full: the divergence D between the teacher's buckets t and the student's, and its
// gradient with respect to the student's logits z (length vocab). For mode full pass
// NewTopK(teacher, vocab) (every id, no tail).
//
// Buckets: the ids of t, plus the tail (every other id) unless t.Tail is −Inf and no
// id is left. The student's bucket log-probs are l_i = z_i − lse(z) and
// l_tail = lse(z_rest) − lse(z), computed without cancellation. The gradient follows
// from ∂D/∂l_b = g_b: ∂D/∂z_j = g_j − π_j·Σg for j in IDs and g_tail·π_j/q_tail −
// π_j·Σg for the rest, where π = softmax(z) and π_j/q_tail = exp(z_j − lse(z_rest)).
func DistillPosition(cfg DistillConfig, z []float64, t TopK) (float64, []float64) {
	V := len(z)
	bk := studentBuckets(z, t)
	l, a, in := bk.l, bk.a, bk.in
	L, lseRest, tail, nb := bk.lse, bk.lseRest, bk.tail, len(bk.l)
	d, g := bucketDivergence(cfg, l, a)
	var sum float64
	for _, x := range g {
		sum += x
	}
	grad := make([]float64, V)
	for j := range z {
		grad[j] = -math.Exp(z[j]-L) * sum
	}
	for b, id := range t.IDs {
		grad[id] += g[b]
	}
	if tail {
		for j, x := range z {
			if !in[j] {
				grad[j] += g[nb-1] * math.Exp(x-lseRest)
			}
		}
	}
	return d, grad
}

// buckets are one position's k+1 (or k) buckets: student log-probs l, teacher
// log-probs a, which ids are in the top k, lse(z) and lse of the other logits.
type buckets struct {
	l, a         []float64
	in           []bool
	lse, lseRest float64
	tail         bool
}

func studentBuckets(z []float64, t TopK) buckets {
	V := len(z)
	bk := buckets{lse: logSumExp(z), in: make([]bool, V)}
	for _, id := range t.IDs {
		bk.in[id] = true
	}
	var rest []float64
	for j, x := range z {
		if !bk.in[j] {
			rest = append(rest, x)
		}
	}
	nb := len(t.IDs)
	bk.tail = len(rest) > 0
	if bk.tail {
		nb++
	}
	bk.l, bk.a = make([]float64, nb), make([]float64, nb)
	for b, id := range t.IDs {
		bk.l[b], bk.a[b] = z[id]-bk.lse, t.LogProbs[b]
	}
	if bk.tail {
		bk.lseRest = logSumExp(rest)
		bk.l[nb-1] = bk.lseRest - bk.lse
		bk.a[nb-1] = t.Tail
		if !(t.Tail >= tailFloor) { // −Inf or NaN: a teacher that rounded its tail away
			bk.a[nb-1] = tailFloor
		}
	}
	return bk
}

// bucketDivergence returns D(P, Q) over buckets with teacher log-probs a and student
// log-probs l, and g_b = ∂D/∂l_b (a held fixed). D is a sum of point-wise terms φ_b
// that each depend on l_b alone:
//
//	reverse_kl: φ = q(l − a),                     φ' = q(l − a + 1)
//	forward_kl: φ = p(a − l),                     φ' = −p
//	jsd:        φ = αp(a − m) + (1−α)q(l − m),    φ' = (1−α)q(l − m),  m = log(αp + (1−α)q)
//
// with p = e^a, q = e^l and 0·log 0 = 0. Clip bounds each φ_b (scope entry) or the sum
// (scope token); a clipped term has zero gradient, as torch's clamp gives.
func bucketDivergence(cfg DistillConfig, l, a []float64) (float64, []float64) {
	phi, g := pointwise(cfg, l, a)
	c := cfg.Clip
	var d float64
	for b := range phi {
		if c > 0 && cfg.ClipScope == ClipEntry && phi[b] > c {
			phi[b], g[b] = c, 0
		}
		d += phi[b]
	}
	if c > 0 && cfg.ClipScope == ClipToken && d > c {
		return c, make([]float64, len(l))
	}
	return d, g
}

// pointwise returns the unclipped terms φ_b and their derivatives φ'_b.
func pointwise(cfg DistillConfig, l, a []float64) (phi, g []float64) {
	phi, g = make([]float64, len(l)), make([]float64, len(l))
	alpha := cfg.JSDAlpha
	for b := range l {
		p, q := math.Exp(a[b]), math.Exp(l[b])
		switch cfg.Divergence {
		case DivForwardKL:
			if p > 0 {
				phi[b] = p * (a[b] - l[b])
			}
			g[b] = -p
		case DivJSD:
			m := logAddExp(math.Log(alpha)+a[b], math.Log1p(-alpha)+l[b])
			if p > 0 {
				phi[b] += alpha * p * (a[b] - m)
			}
			if q > 0 {
				phi[b] += (1 - alpha) * q * (l[b] - m)
				g[b] = (1 - alpha) * q * (l[b] - m)
			}
		default: // reverse KL
			if q > 0 {
				phi[b] = q * (l[b] - a[b])
				g[b] = q * (l[b] - a[b] + 1)
			}
		}
	}
	return phi, g
}

// SampledTokenPosition is the float64 reference of one position of mode sampled_token
// with the student as base: the value is the one-sample estimate of KL(π‖π_T) at the
// sampled token y, l_y − a_y = −Δ (it can be negative), and the gradient with respect
// to z is that of the policy-gradient surrogate −sg(A)·l_y with A = gate(Δ):
// −A·(e_y − softmax(z)). Without a gate its expectation over y ~ softmax(z) is exactly
// the gradient of the reverse KL over the full vocabulary (tested), which is why the
// sampled token is an unbiased but noisy stand-in for mode full.
func SampledTokenPosition(gate func(float64) float64, z []float64, y int, teacherLogProb float64) (float64, []float64) {
	L := logSumExp(z)
	ly := z[y] - L
	adv := teacherLogProb - ly
	if gate != nil {
		adv = gate(adv)
	}
	grad := make([]float64, len(z))
	for j, x := range z {
		grad[j] = adv * math.Exp(x-L)
	}
	grad[y] -= adv
	return ly - teacherLogProb, grad
}

// LogSoftmax returns z − logsumexp(z).
func LogSoftmax(z []float64) []float64 {
	L := logSumExp(z)
	out := make([]float64, len(z))
	for i, x := range z {
		out[i] = x - L
	}
	return out
}

// logSumExp returns log Σ exp(x), −Inf for an empty or all −Inf x.
func logSumExp(x []float64) float64 {
	m := math.Inf(-1)
	for _, v := range x {
		m = math.Max(m, v)
	}
	if math.IsInf(m, -1) {
		return m
	}
	var s float64
	for _, v := range x {
		s += math.Exp(v - m)
	}
	return m + math.Log(s)
}

// logAddExp returns log(e^x + e^y).
func logAddExp(x, y float64) float64 {
	m := math.Max(x, y)
	if math.IsInf(m, -1) {
		return m
	}
	return m + math.Log(math.Exp(x-m)+math.Exp(y-m))
}
