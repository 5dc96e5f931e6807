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

// TopKIDs is whose top k mode topk keeps (docs/distillation.md "Whose top k").
type TopKIDs string

// The top-k id choices.
const (
	// IDsStudent: the student's k most likely ids, the teacher gathered at them (the
	// SDPO authors' verl code, TRL's local path, sdpo-rl; the default).
	IDsStudent TopKIDs = "student"
	// IDsTeacher: the teacher's k most likely ids (TRL's vLLM-server path; hindsight's
	// only choice before issue 37).
	IDsTeacher TopKIDs = "teacher"
	// IDsUnion: the student's k ids and the teacher's k ids (up to 2k), one tail.
	IDsUnion TopKIDs = "union"
)

// TailMode is how mode topk computes the tail bucket's log-mass on both sides.
type TailMode string

// The tail modes.
const (
	// TailClamped is the peers' tail, on both sides: log(1 − Σ_b p_b) over the kept
	// ids' probabilities, with the sum capped at exp(−1e-7) so the tail is never −Inf:
	// its floor is log(1 − exp(−1e-7)) ≈ −16.118 nats. A capped tail gives no gradient
	// (torch's clamp). The default.
	TailClamped TailMode = "clamped"
	// TailExact is logsumexp of every other id's log-prob, on both sides, with the
	// teacher's tail raised to −30 nats wherever it is below (or −Inf), so the reverse
	// KL stays finite.
	TailExact TailMode = "exact"
)

// ClampedTailFloor is the least tail of TailClamped: log(1 − exp(−1e-7)), nats.
var ClampedTailFloor = math.Log(-math.Expm1(-1e-7))

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
	// TopKIDs is whose top k mode topk keeps: student (default), teacher or union.
	TopKIDs TopKIDs `yaml:"topk_ids"`
	// Tail is how mode topk computes the tail bucket: clamped (default, the peers')
	// or exact.
	Tail TailMode `yaml:"tail"`
	// ISCap truncates the importance weight on the divergence term (modes topk and
	// full): each position's D_t is multiplied by min(π/π_old, is_cap) with π the
	// student's and π_old the sampler's probability of the sampled token, as the SDPO
	// authors do (is_clip 2). 0 turns the weight off. The sampled_token mode's hint
	// term carries credit.rho_max's ρ instead.
	ISCap float64 `yaml:"is_cap"`
}

// DefaultDistillConfig returns the defaults: sampled_token (today's Δ credit); for topk
// k = 100 of the student's ids with the peers' clamped tail, and for both topk and full
// reverse KL, JSD α 0.5 when chosen, no clip (scope entry when set), the importance
// weight capped at 2.
func DefaultDistillConfig() DistillConfig {
	return DistillConfig{Mode: DistillSampledToken, TopK: 100, Divergence: DivReverseKL, JSDAlpha: 0.5, ClipScope: ClipEntry,
		TopKIDs: IDsStudent, Tail: TailClamped, ISCap: 2}
}

// Validate names the first bad field under prefix ("distill." inside credit's config).
// Empty fields (a config or checkpoint written before the section) take their
// defaults.
func (c *DistillConfig) Validate(prefix string) error {
	d := DefaultDistillConfig()
	if c.Mode == "" && c.TopK == 0 && c.Divergence == "" && c.JSDAlpha == 0 && c.ClipScope == "" && c.TopKIDs == "" && c.Tail == "" {
		clip := c.Clip
		*c = d
		c.Clip = clip
	}
	if c.ClipScope == "" {
		c.ClipScope = d.ClipScope
	}
	if c.TopKIDs == "" {
		c.TopKIDs = d.TopKIDs
	}
	if c.Tail == "" {
		c.Tail = d.Tail
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
	switch c.TopKIDs {
	case IDsStudent, IDsTeacher, IDsUnion:
	default:
		return fmt.Errorf("%stopk_ids: %q is not student, teacher or union", prefix, c.TopKIDs)
	}
	switch c.Tail {
	case TailClamped, TailExact:
	default:
		return fmt.Errorf("%stail: %q is not clamped or exact", prefix, c.Tail)
	}
	if math.IsNaN(c.ISCap) || math.IsInf(c.ISCap, 0) || c.ISCap < 0 {
		return fmt.Errorf("%sis_cap: %v must be finite and non-negative (0: off)", prefix, c.ISCap)
	}
	return nil
}

// TopK is the teacher's view of one position in mode topk: the kept token ids with the
// teacher's log-probs of them (nats, over the whole vocabulary), and Tail, the log of
// the teacher's exact mass of every other id. Tail is −Inf when IDs cover the
// vocabulary: the tail bucket is then empty on both sides and left out. Whose ids are
// kept is DistillConfig.TopKIDs (SelectTopK); the buckets' tails follow
// DistillConfig.Tail (TailExact reads Tail, TailClamped recomputes it from LogProbs).
//
// On the device the teacher pass computes Tail exactly as logsumexp of the other
// logits minus the normaliser; TailLogProb is the clamped tail of the k log-probs.
type TopK struct {
	IDs      []int
	LogProbs []float64
	Tail     float64
}

// NewTopK returns the top k of a teacher's full log-prob vector (ties broken by the
// lower id) with its exact tail. k ≥ len(lp) keeps every id and no tail.
func NewTopK(lp []float64, k int) TopK {
	return gatherTopK(lp, topIDs(lp, k))
}

// SelectTopK returns the teacher's view of one position for mode topk with ids chosen
// as which says: the student's k most likely ids (by its log-probs or logits s), the
// teacher's (by its log-probs lp), or the student's followed by the teacher's that are
// not among them. Ties go to the lower id. The log-probs are the teacher's, gathered.
func SelectTopK(which TopKIDs, s, lp []float64, k int) TopK {
	switch which {
	case IDsTeacher:
		return NewTopK(lp, k)
	case IDsUnion:
		ids := topIDs(s, k)
		for _, id := range topIDs(lp, k) {
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		return gatherTopK(lp, ids)
	default:
		return gatherTopK(lp, topIDs(s, k))
	}
}

// topIDs returns the ids of x's k largest values, largest first, ties to the lower id.
func topIDs(x []float64, k int) []int {
	ids := make([]int, len(x))
	for i := range ids {
		ids[i] = i
	}
	slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(x[b], x[a]) })
	k = min(k, len(x))
	return ids[:k:k]
}

// gatherTopK returns lp at ids and the exact log-mass of the other ids.
func gatherTopK(lp []float64, ids []int) TopK {
	t := TopK{IDs: ids, LogProbs: make([]float64, len(ids)), Tail: math.Inf(-1)}
	in := make([]bool, len(lp))
	for i, id := range ids {
		t.LogProbs[i] = lp[id]
		in[id] = true
	}
	var rest []float64
	for id, x := range lp {
		if !in[id] {
			rest = append(rest, x)
		}
	}
	if len(rest) > 0 {
		t.Tail = logSumExp(rest)
	}
	return t
}

// TailLogProb returns the peers' tail of top-k log-probs lp: log(1 − Σ exp(lp)), with
// log Σ capped at −1e-7 so rounding cannot make it −Inf or NaN (ClampedTailFloor,
// about −16.118 nats). capped reports that the cap applied (the tail then has no
// gradient).
func TailLogProb(lp []float64) (tail float64, capped bool) {
	s := logSumExp(lp)
	if s >= -1e-7 {
		return ClampedTailFloor, true
	}
	return math.Log(-math.Expm1(s)), false
}

// tailFloor is TailExact's least teacher tail log-prob when the student's tail bucket
// is not empty (nats): a teacher whose top k rounded to all of the mass would
// otherwise make the reverse KL infinite.
const tailFloor = -30

// DistillPosition is the float64 reference of one scored position of modes topk and
// full: the divergence D between the teacher's buckets t and the student's, and its
// gradient with respect to the student's logits z (length vocab). For mode full pass
// NewTopK(teacher, vocab) (every id, no tail).
//
// Buckets: the ids of t, plus the tail (every other id) unless no id is left. The
// student's bucket log-probs are l_i = z_i − lse(z) and, with TailExact, l_tail =
// lse(z_rest) − lse(z), computed without cancellation; with TailClamped both sides'
// tails are TailLogProb of their bucket log-probs. The gradient follows from
// ∂D/∂l_b = g_b. TailExact: ∂D/∂z_j = g_j − π_j·Σg for j in IDs and
// g_tail·π_j/q_tail − π_j·Σg for the rest, where π = softmax(z) and π_j/q_tail =
// exp(z_j − lse(z_rest)). TailClamped, as the peers' autograd has it: the tail is a
// function of the kept l_i, ∂l_tail/∂l_i = −exp(l_i − l_tail) (0 where capped), so
// g'_i = g_i − g_tail·exp(l_i − l_tail) and ∂D/∂z_j = g'_j·[j in IDs] − π_j·Σg'. The
// two are equal in exact arithmetic; near the cap they differ by the clamped tail's
// cancellation (about 1e-8 relative), and the clamped route is the peers' to 1e-10.
func DistillPosition(cfg DistillConfig, z []float64, t TopK) (float64, []float64) {
	V := len(z)
	bk := studentBuckets(cfg, z, t)
	l, a, in := bk.l, bk.a, bk.in
	L, lseRest, tail, nb := bk.lse, bk.lseRest, bk.tail, len(bk.l)
	d, g := bucketDivergence(cfg, l, a)
	exactTail := tail && cfg.Tail == TailExact
	if tail && !exactTail {
		gt := g[nb-1]
		g = g[:nb-1]
		if !bk.capped {
			for b := range g {
				g[b] -= gt * math.Exp(l[b]-l[nb-1])
			}
		}
	}
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
	if exactTail {
		for j, x := range z {
			if !in[j] {
				grad[j] += g[nb-1] * math.Exp(x-lseRest)
			}
		}
	}
	return d, grad
}

// buckets are one position's k+1 (or k) buckets: student log-probs l, teacher
// log-probs a, which ids are in the top k, lse(z) and lse of the other logits, and
// whether the student's clamped tail was capped.
type buckets struct {
	l, a         []float64
	in           []bool
	lse, lseRest float64
	tail, capped bool
}

func studentBuckets(cfg DistillConfig, z []float64, t TopK) buckets {
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
	if !bk.tail {
		return bk
	}
	bk.lseRest = logSumExp(rest)
	if cfg.Tail == TailExact {
		bk.l[nb-1] = bk.lseRest - bk.lse
		bk.a[nb-1] = t.Tail
		if !(t.Tail >= tailFloor) { // −Inf or NaN: a teacher that rounded its tail away
			bk.a[nb-1] = tailFloor
		}
		return bk
	}
	bk.l[nb-1], bk.capped = TailLogProb(bk.l[:nb-1])
	bk.a[nb-1], _ = TailLogProb(bk.a[:nb-1])
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

// Tempered returns the logits z divided by the sampling temperature T (the peers'
// logits / T; the device's tempered): what DistillPosition, SampledTokenPosition and
// SelectTopK take for a rollout scored at T (Rollout.Temp). T = 1 returns z's values.
func Tempered(z []float64, T float64) []float64 {
	out := make([]float64, len(z))
	for i, v := range z {
		out[i] = v / T
	}
	return out
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
