// Command attention benchmarks the cost of attention on long rollouts: xla.Scorer and
// one xla.Trainer step with chunks that attend to their causal span of the KV cache
// (the default) against the whole capacity bucket (ScorerOptions.BucketAttention,
// the path before), in one process, with a PyTorch peer that scores the same chunks
// with the same weights (explicit lower-right causal mask) and whose log-probs are
// checked against ours.
//
//	go run ./bench/attention -backend xla-cpu                        # 8k and 32k, before and after, train 8k/32k
//	go run ./bench/attention -backend xla-cpu -score 100128,131072 -before= -train=
//	go run ./bench/attention -backend xla-cpu -xla-temps $(mktemp -d)         # with step temporaries
//
// Per measurement: wall time (a cold run: compiles included, as `hindsight score` of
// one rollout pays them; with -warm ≥ T a second, warm run too), tokens/s, the
// process's peak RSS (VmHWM, reset before each run; the KV cache is shown apart;
// for a warm run also its growth over the RSS before it), with -xla-temps DIR the
// largest step program's temporaries as XLA's buffer assignment sizes them,
// the attention work done (query-key pairs scored) and the whole forward's FLOPs
// against causal attention's, and the number of step programs. It is a benchmark,
// not a test: nothing asserts on the numbers.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

type options struct {
	preset, backend, python string
	score, before, train    []int
	warm, threads, chunk    int
	trainWarm               int
	peerMax                 int
	dump                    string // XLA dump directory for the step temporaries; "" for none
}

func main() {
	var o options
	var score, before, train string
	flag.StringVar(&o.preset, "preset", "small", "init-model preset")
	flag.StringVar(&o.backend, "backend", xla.CPUPluginName, "GoMLX backend")
	flag.StringVar(&score, "score", "8192,32768", "rollout lengths to score (the span path)")
	flag.StringVar(&before, "before", "8192,32768", "of those, the lengths also scored with BucketAttention (the path before)")
	flag.StringVar(&train, "train", "8192,32768", "rollout lengths of one training step each, before and after")
	flag.IntVar(&o.warm, "warm", 32768, "score lengths ≤ this twice and report the warm run as well (the path before: only ≤ 8192, its one or two programs compile in seconds)")
	flag.IntVar(&o.trainWarm, "train-warm", 8192, "train lengths ≤ this take a second step on the same trainer, reported as warm")
	flag.IntVar(&o.chunk, "chunk", xla.DefaultChunk, "Scorer chunk")
	flag.StringVar(&o.python, "python", "/work/venvs/torch2/bin/python", "python with torch for the peer; empty to skip it")
	flag.IntVar(&o.threads, "threads", runtime.NumCPU(), "PyTorch threads")
	flag.IntVar(&o.peerMax, "peer-max", 1<<30, "run the PyTorch peer for lengths ≤ this")
	flag.StringVar(&o.dump, "xla-temps", "", "an empty directory: XLA dumps its compiled programs there (--xla_dump_to) and each scoring row reports the largest step program's temporaries from XLA's buffer assignment (XLA backends only)")
	flag.Parse()
	var err error
	for _, p := range []struct {
		s   string
		out *[]int
	}{{score, &o.score}, {before, &o.before}, {train, &o.train}} {
		if *p.out, err = ints(p.s); err != nil {
			fmt.Fprintln(os.Stderr, "bench/attention:", err)
			os.Exit(2)
		}
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/attention:", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 2 {
			return nil, fmt.Errorf("length %q: want an integer ≥ 2", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, o options) error {
	if o.dump != "" {
		// XLA reads $XLA_FLAGS once, at the process's first compile.
		os.Setenv("XLA_FLAGS", strings.TrimSpace(os.Getenv("XLA_FLAGS")+" --xla_dump_to="+o.dump))
	}
	backend, err := xla.NewBackend(xla.ResolveBackend(o.backend, ""))
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "bench-attention-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "model")
	mc, err := data.InitModel(dir, data.InitOptions{Preset: o.preset, Tokenizer: "bytes", Seed: 1})
	if err != nil {
		return err
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return err
	}
	cost := newFlops(mc, m.NumParameters())
	_, device := xla.BackendInfo(backend)
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("# %s preset (%d parameters), chunk %d, backend %s, XLA_FLAGS=%q; load average at start %s",
		o.preset, m.NumParameters(), o.chunk, device, os.Getenv("XLA_FLAGS"), load)
	if len(o.score) > 0 {
		table("Scoring", "T", "path", "time (cold)", "time (warm)", "tokens/s", "peak RSS", "warm peak − resident before", "KV cache",
			"step temporaries (XLA)", "attention work / causal", "FLOPs / causal", "programs", "after/before", "PyTorch peer", "ours/peer", "max abs Δ log-prob")
	}
	for _, T := range o.score {
		tokens := benchutil.Tokens(T, mc.VocabSize, 1, 2)
		after, err := scoreRun(ctx, backend, m, tokens, o, false, cost)
		if err != nil {
			return err
		}
		var before *scoreResult
		if contains(o.before, T) {
			if before, err = scoreRun(ctx, backend, m, tokens, o, true, cost); err != nil {
				return err
			}
		}
		var peer *peerResult
		if o.python != "" && T <= o.peerMax {
			if peer, err = runPeer(o, dir, tokens); err != nil {
				return err
			}
		}
		fmt.Println(after.row(T, "spans (after)", before, peer))
		if before != nil {
			fmt.Println(before.row(T, "bucket (before)", nil, nil))
		}
	}
	if len(o.train) > 0 {
		table("One training step (one rollout, truncated backprop, training chunk 256)", "T", "path", "step (cold)", "step (warm)",
			"of which scoring", "tokens/s", "peak RSS", "gradient attention work / causal", "step FLOPs / causal", "gradient programs", "after/before")
	}
	for _, T := range o.train {
		tokens := benchutil.Tokens(T, mc.VocabSize, 1, 2)
		after, err := trainRun(ctx, backend, dir, tokens, false, cost, T <= o.trainWarm)
		if err != nil {
			return err
		}
		before, err := trainRun(ctx, backend, dir, tokens, true, cost, T <= o.trainWarm)
		if err != nil {
			return err
		}
		fmt.Println(after.row(T, "spans (after)", before))
		fmt.Println(before.row(T, "bucket (before)", nil))
	}
	load, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("\n# load average at the end %s", load)
	return nil
}

// table prints a section title and a markdown table's header row and separator.
func table(title string, cols ...string) {
	fmt.Printf("\n## %s\n| %s |\n|%s\n", title, strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
}

func contains(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// flops prices the forward pass: per token the matrix products (2 × the non-embedding
// parameters, plus the output head), per attended query-key pair 4 × heads × head_dim
// per layer (scores and the weighted sum).
type flops struct{ perToken, perPair float64 }

func newFlops(mc *data.ModelConfig, params int) flops {
	embed := mc.VocabSize * mc.HiddenSize
	matmul := params - embed // the embedding is a lookup; an untied lm_head is in params
	if mc.TieWordEmbeddings {
		matmul += embed // the tied head is a matmul with the embedding
	}
	return flops{
		perToken: 2 * float64(matmul),
		perPair:  4 * float64(mc.NumAttentionHeads*mc.HeadDim*mc.NumHiddenLayers),
	}
}

// ratio is the forward FLOPs of T tokens with pairs attended over those with
// causal attention, and the attention work alone.
func (f flops) ratio(T int, pairs int64) (attn, total float64) {
	causal := float64(T) * float64(T+1) / 2
	return float64(pairs) / causal, (f.perToken*float64(T) + f.perPair*float64(pairs)) / (f.perToken*float64(T) + f.perPair*causal)
}

type scoreResult struct {
	cold, warm  time.Duration
	T           int
	peakRSS, kv int64
	warmGrowth  int64 // the warm run's peak RSS − the RSS before it (0: no warm run)
	temps       int64 // the largest step program's temporaries (−1: not measured)
	attn, total float64
	programs    int
	lp          []float32
}

func (r *scoreResult) best() time.Duration {
	if r.warm > 0 {
		return r.warm
	}
	return r.cold
}

func scoreRun(ctx context.Context, backend backends.Backend, m *xla.Model, tokens []int32, o options, bucket bool, cost flops) (*scoreResult, error) {
	s, err := xla.NewScorer(backend, m, xla.ScorerOptions{Chunk: o.chunk, BucketAttention: bucket})
	if err != nil {
		return nil, err
	}
	T := len(tokens)
	r := &scoreResult{T: T, temps: -1}
	dumped := dumpFiles(o.dump)
	for i := range 2 {
		if i == 1 && (T > o.warm || bucket && T > 8192) {
			break
		}
		runtime.GC()
		resetPeak()
		base := residentRSS()
		st0 := s.Stats().Attention
		t0 := time.Now()
		lp, c, err := s.Score(ctx, tokens)
		took := time.Since(t0)
		if err != nil {
			return nil, err
		}
		r.peakRSS = peakRSS()
		r.kv = c.Bytes()
		c.Close()
		st := s.Stats().Attention
		if i == 0 {
			r.cold, r.lp = took, lp
			r.programs = st.Programs
			r.attn, r.total = cost.ratio(T, st.AttendedPairs-st0.AttendedPairs)
		} else {
			r.warm, r.warmGrowth = took, r.peakRSS-base
		}
		fmt.Fprintf(os.Stderr, "score T=%d bucket=%v run %d: %v, %d programs, peak RSS %.2f GB, resident before %.2f GB, KV cache %.2f GB\n", T, bucket, i, took.Round(time.Millisecond), st.Programs, gb(r.peakRSS), gb(base), gb(r.kv))
	}
	if o.dump != "" {
		if r.temps, err = largestTemps(o.dump, dumped); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// dumpFiles lists the buffer assignments XLA has dumped into dir so far.
func dumpFiles(dir string) map[string]bool {
	seen := map[string]bool{}
	if dir == "" {
		return seen
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*buffer-assignment.txt"))
	for _, f := range files {
		seen[f] = true
	}
	return seen
}

// largestTemps is the largest preallocated-temp allocation (bytes) among the
// programs XLA dumped into dir since seen: what a step needs beyond its inputs
// and outputs.
func largestTemps(dir string, seen map[string]bool) (int64, error) {
	var most int64
	for f := range dumpFiles(dir) {
		if seen[f] {
			continue
		}
		raw, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		var temps int64
		for _, line := range strings.Split(string(raw), "\n") {
			// allocation 570: size 440336384, page 0, preallocated-temp:
			if !strings.HasPrefix(line, "allocation ") || !strings.Contains(line, "preallocated-temp") {
				continue
			}
			_, rest, _ := strings.Cut(line, "size ")
			n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(rest, ",", 2)[0]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %q: %w", f, line, err)
			}
			temps += n
		}
		most = max(most, temps)
	}
	return most, nil
}

func (r *scoreResult) row(T int, path string, before *scoreResult, peer *peerResult) string {
	warm := "—"
	if r.warm > 0 {
		warm = secs(r.warm)
	}
	ab, peerCol, vsPeer, delta := "—", "—", "—", "—"
	if before != nil {
		ab = fmt.Sprintf("%.2f× faster", before.best().Seconds()/r.best().Seconds())
	}
	if peer != nil {
		peerCol = fmt.Sprintf("%s, %s tok/s, %.2f GB (torch %s)", secs(time.Duration(peer.Seconds*float64(time.Second))), tps(peer.TokensPerSecond), gb(peer.PeakRSS), peer.Torch)
		vsPeer = fmt.Sprintf("%.2f", peer.Seconds/r.best().Seconds())
		var worst float64
		for i, want := range peer.LogProbs {
			if want != nil && i < len(r.lp) {
				worst = math.Max(worst, math.Abs(float64(r.lp[i])-*want))
			}
		}
		delta = fmt.Sprintf("%.1e", worst)
	}
	growth, temps := "—", "—"
	if r.warmGrowth > 0 {
		growth = fmt.Sprintf("%.2f GB", gb(r.warmGrowth))
	}
	if r.temps >= 0 {
		temps = fmt.Sprintf("%.0f MiB", float64(r.temps)/(1<<20))
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %.2f GB | %s | %.2f GB | %s | %.3f | %.3f | %d | %s | %s | %s | %s |",
		T, path, secs(r.cold), warm, tps(float64(T)/r.best().Seconds()), gb(r.peakRSS), growth, gb(r.kv), temps, r.attn, r.total, r.programs, ab, peerCol, vsPeer, delta)
}

type trainResult struct {
	took, warm  time.Duration // cold and warm step (0: not measured)
	score       time.Duration // the scoring part of the last step
	peakRSS     int64
	attn, total float64
	programs    int
	T           int
}

func trainRun(ctx context.Context, backend backends.Backend, dir string, tokens []int32, bucket bool, cost flops, warm bool) (*trainResult, error) {
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return nil, err
	}
	// Baseline none: a lone rollout with reward 1 has advantage 1, so the step has a
	// gradient pass (with the group baseline it would have none).
	cfg := credit.DefaultConfig()
	cfg.Baseline = credit.BaselineNone
	tr, err := xla.NewTrainer(backend, m, xla.TrainerOptions{Scorer: xla.ScorerOptions{BucketAttention: bucket}, Credit: cfg, Seed: 1})
	if err != nil {
		return nil, err
	}
	T := len(tokens)
	r := credit.Sequence{ID: "bench", TaskID: "bench", Tokens: tokens, Sampler: make([]float64, T), Trainable: make([]bool, T), Reward: 1, HasReward: true}
	for t := 1; t < T; t++ {
		r.Sampler[t], r.Trainable[t] = -math.Log(float64(m.Config.VocabSize)), true
	}
	res := &trainResult{T: T}
	var gs, ss xla.AttentionStats
	for i := range 2 {
		if i == 1 && !warm {
			break
		}
		runtime.GC()
		resetPeak()
		gs0, ss0 := tr.GradientStats(), tr.Scorer().Stats().Attention
		t0 := time.Now()
		met, err := tr.Step(ctx, []credit.Sequence{r})
		took := time.Since(t0)
		if err != nil {
			return nil, err
		}
		if !met.Updated {
			return nil, fmt.Errorf("train T=%d: the step had no signal, so no gradient pass ran", T)
		}
		if i == 0 {
			res.took = took
		} else {
			res.warm = took
		}
		res.score, res.peakRSS = met.ScoreTook, peakRSS()
		gs, ss = tr.GradientStats(), tr.Scorer().Stats().Attention
		gs.AttendedPairs -= gs0.AttendedPairs
		ss.AttendedPairs -= ss0.AttendedPairs
		fmt.Fprintf(os.Stderr, "train T=%d bucket=%v step %d: %v (scoring %v), %d gradient programs\n", T, bucket, i, took.Round(time.Millisecond), met.ScoreTook.Round(time.Millisecond), gs.Programs)
	}
	res.programs = gs.Programs
	res.attn, _ = cost.ratio(T, gs.AttendedPairs)
	// The step's FLOPs: the scoring forward, then the gradient pass's forward and
	// backward (about 3 forwards), against the same with causal attention.
	causal := float64(T) * float64(T+1) / 2
	done := cost.perToken*4*float64(T) + cost.perPair*(float64(ss.AttendedPairs)+3*float64(gs.AttendedPairs))
	res.total = done / (cost.perToken*4*float64(T) + cost.perPair*4*causal)
	return res, nil
}

func (r *trainResult) best() time.Duration {
	if r.warm > 0 {
		return r.warm
	}
	return r.took
}

func (r *trainResult) row(T int, path string, before *trainResult) string {
	ab, warm := "—", "—"
	if before != nil {
		ab = fmt.Sprintf("%.2f× faster", before.best().Seconds()/r.best().Seconds())
	}
	if r.warm > 0 {
		warm = secs(r.warm)
	}
	return fmt.Sprintf("| %d | %s | %s | %s | %s | %s | %.2f GB | %.3f | %.3f | %d | %s |",
		T, path, secs(r.took), warm, secs(r.score), tps(float64(T)/r.best().Seconds()), gb(r.peakRSS), r.attn, r.total, r.programs, ab)
}

type peerResult struct {
	Seconds         float64    `json:"seconds"`
	TokensPerSecond float64    `json:"tokens_per_second"`
	PeakRSS         int64      `json:"peak_rss_bytes"`
	LogProbs        []*float64 `json:"logprobs"`
	Torch           string     `json:"torch"`
	Attention       string     `json:"attention"`
}

func runPeer(o options, dir string, tokens []int32) (*peerResult, error) {
	raw, err := json.Marshal(tokens)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "tokens.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return nil, err
	}
	script := filepath.Join(benchutil.CallerDir("bench/attention"), "torch_attention.py")
	cmd := exec.Command(o.python, script, dir, path, strconv.Itoa(o.chunk), strconv.Itoa(o.threads))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pytorch peer: %w", err)
	}
	var p peerResult
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("pytorch peer output: %w", err)
	}
	fmt.Fprintf(os.Stderr, "peer T=%d: %.1f s (torch %s, %s)\n", len(tokens), p.Seconds, p.Torch, p.Attention)
	return &p, nil
}

func secs(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

func tps(x float64) string { return strconv.FormatFloat(math.Round(x), 'f', 0, 64) }

func gb(b int64) float64 { return float64(b) / 1e9 }

// resetPeak resets the process's peak RSS (VmHWM; Linux ≥ 4.0).
func resetPeak() { os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS reads VmHWM (bytes) from /proc/self/status; 0 if unreadable.
func peakRSS() int64 { return procStatus("VmHWM:") }

// residentRSS reads VmRSS (bytes) from /proc/self/status; 0 if unreadable.
func residentRSS() int64 { return procStatus("VmRSS:") }

func procStatus(field string) int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
