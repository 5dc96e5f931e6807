// Command backends benchmarks the same model on GoMLX's pure-Go backend, XLA's CPU
// PJRT plugin and PyTorch on the CPU in one run: scoring tokens/s (xla.Scorer.Score
// against a no_grad forward) and training tokens/s (one xla.Trainer.Step against one
// eager forward + backward + AdamW step), for each model preset × rollout length. It
// prints markdown tables with ratios against PyTorch and writes every number to
// bench/backends/results-<date>.json.
//
//	GOMLX_NO_AUTO_INSTALL=1 go run ./bench/backends
//
// Debian's python3-torch does its matmuls in whatever libblas.so.3 the system has;
// with only libblas3 that is the unoptimized reference BLAS (~2.4 GFLOP/s here).
// -openblas DIR adds a second PyTorch run with DIR (holding OpenBLAS's libblas.so.3,
// e.g. extracted with `apt-get download libopenblas0-pthread && dpkg -x …`) first on
// LD_LIBRARY_PATH; ratios stay against the default PyTorch.
//
// Needs the XLA CPU plugin (`go run ./cmd/hindsight fetch-xla-cpu`) and
// /usr/bin/python3 with Debian's python3-torch and python3-numpy.
//
// Each measurement runs once as a warm-up (it compiles the executables: its excess
// over the steady time is reported as compile time), then up to -reps more times,
// stopping early once the timed runs pass -max-seconds; the fastest is reported.
// Tokens/s is rollout length T over that time for both scoring and training.
//
// The training rollout has T tokens, the first 16 untrainable, a sampler log-prob of
// −2 on the rest, reward 1, and one hinted segment [T/2, T/2+64) with a 16-token hint,
// so Trainer.Step runs what it runs in production: the student scoring pass, the
// live teacher's hinted pass over the segment, credit, the chunked truncated-backprop
// gradient (default chunk 256) and AdamW. The PyTorch step is one full causal forward
// with autograd, the loss −Σ w_t log π(y_t) with fixed random w, backward, clipping and
// AdamW: it does no separate scoring or teacher pass.
//
// It is a benchmark, not a test: nothing asserts on the numbers.
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
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/internal/benchutil"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/xla"
)

// Timing is one measured operation: the warm-up call and the fastest timed call.
type Timing struct {
	FirstS          float64 `json:"first_s"`
	BestS           float64 `json:"best_s"`
	Reps            int     `json:"reps"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	// CompileS is FirstS − BestS: graph building and compilation of the warm-up.
	CompileS float64 `json:"compile_s"`
	// RatioVsPyTorch is TokensPerSecond over PyTorch's for the same cell.
	RatioVsPyTorch float64 `json:"ratio_vs_pytorch,omitempty"`
}

// Result is one backend on one cell.
type Result struct {
	Backend string `json:"backend"` // "pure-go", "xla-cpu" or "pytorch"
	Spec    string `json:"spec,omitempty"`
	Score   Timing `json:"score"`
	Train   Timing `json:"train"`
	// MaxAbsLogProbDiff is the largest |Δ log-prob| of this backend's scores against
	// PyTorch's on the same rollout (0 for PyTorch itself).
	MaxAbsLogProbDiff float64 `json:"max_abs_logprob_diff"`
	TrainLoss         float64 `json:"train_loss,omitempty"`
}

// Cell is one model × rollout length.
type Cell struct {
	Preset     string   `json:"preset"`
	Parameters int      `json:"parameters"`
	Tokens     int      `json:"tokens"`
	Results    []Result `json:"results"`
}

// Report is the JSON file.
type Report struct {
	Date        string   `json:"date"`
	Command     string   `json:"command"`
	GoVersion   string   `json:"go_version"`
	GoMLX       string   `json:"gomlx"`
	Torch       string   `json:"torch"`
	TorchThread int      `json:"torch_threads"`
	NumCPU      int      `json:"num_cpu"`
	GOMAXPROCS  int      `json:"gomaxprocs"`
	ScoreChunk  int      `json:"score_chunk"`
	TrainChunk  int      `json:"train_chunk"`
	Reps        int      `json:"reps"`
	MaxSeconds  float64  `json:"max_seconds"`
	Notes       []string `json:"notes"`
	Cells       []Cell   `json:"cells"`
	TotalS      float64  `json:"total_s"`
}

type options struct {
	presets, lengths []string
	pureGo, xlaCPU   string
	python           string
	threads, reps    int
	maxSeconds       float64
	out              string
	openBLAS         string
}

func main() {
	var o options
	presets := flag.String("presets", "tiny,small", "comma-separated init-model presets")
	lengths := flag.String("lengths", "256,1024", "comma-separated rollout lengths (tokens)")
	flag.StringVar(&o.pureGo, "go-backend", xla.DefaultBackend, "pure-Go backend spec; empty to skip")
	flag.StringVar(&o.xlaCPU, "xla-backend", xla.CPUPluginName, "XLA CPU backend spec; empty to skip")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "python with torch and numpy; empty to skip PyTorch")
	flag.IntVar(&o.threads, "threads", 2, "PyTorch threads (torch.set_num_threads)")
	flag.IntVar(&o.reps, "reps", 3, "timed repetitions after the warm-up (at most)")
	flag.Float64Var(&o.maxSeconds, "max-seconds", 15, "stop repeating once the timed runs of one measurement pass this")
	flag.StringVar(&o.openBLAS, "openblas", "", "also run PyTorch with LD_LIBRARY_PATH=DIR (a directory holding OpenBLAS's libblas.so.3), as backend pytorch-openblas")
	flag.StringVar(&o.out, "out", "", "results JSON (default bench/backends/results-<date>.json beside this source; - for none)")
	flag.Parse()
	o.presets, o.lengths = split(*presets), split(*lengths)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/backends:", err)
		os.Exit(1)
	}
}

func split(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

type backendRun struct {
	name, spec string
	b          backends.Backend
}

func run(o options) error {
	start := time.Now()
	os.Setenv("GOMLX_NO_AUTO_INSTALL", "1")
	ctx := context.Background()
	var bes []backendRun
	for _, nb := range [][2]string{{"pure-go", o.pureGo}, {"xla-cpu", o.xlaCPU}} {
		if nb[1] == "" {
			continue
		}
		spec := xla.ResolveBackend(nb[1], "")
		b, err := xla.NewBackend(spec)
		if err != nil {
			return fmt.Errorf("%s: %w", nb[0], err)
		}
		bes = append(bes, backendRun{nb[0], spec, b})
	}
	tmp, err := os.MkdirTemp("", "bench-backends-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	rep := Report{
		Date:        time.Now().Format("2006-01-02"),
		Command:     "GOMLX_NO_AUTO_INSTALL=1 go run ./bench/backends " + strings.Join(os.Args[1:], " "),
		GoVersion:   runtime.Version(),
		GoMLX:       moduleVersion("github.com/gomlx/gomlx"),
		TorchThread: o.threads,
		NumCPU:      runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		ScoreChunk:  xla.DefaultChunk,
		TrainChunk:  xla.DefaultChunkTrain,
		Reps:        o.reps,
		MaxSeconds:  o.maxSeconds,
		Notes: []string{
			"tokens/s = rollout length T / fastest timed call; compile_s = warm-up call − fastest call",
			"Go training: Trainer.Step on one rollout (student pass, live-teacher hinted pass over [T/2, T/2+64) with a 16-token hint, credit, chunked truncated-backprop gradient, AdamW)",
			"PyTorch training: one eager causal forward with autograd, loss −Σ w_t log π(y_t) with fixed random w, backward, clip_grad_norm_(1), AdamW; no separate scoring or teacher pass",
			"PyTorch scoring: one eager no_grad causal pass of the whole rollout ([T, vocab] log_softmax)",
			"pytorch uses the system libblas.so.3 (Debian: reference BLAS unless OpenBLAS/BLIS is installed); pytorch-openblas (with -openblas) loads OpenBLAS 0.3.21 via LD_LIBRARY_PATH",
		},
	}
	for _, preset := range o.presets {
		dir := filepath.Join(tmp, preset)
		mc, err := data.InitModel(dir, data.InitOptions{Preset: preset, Tokenizer: "bytes", Seed: 1})
		if err != nil {
			return err
		}
		for _, ls := range o.lengths {
			T, err := strconv.Atoi(ls)
			if err != nil || T < 256 {
				return fmt.Errorf("length %q: want an integer ≥ 256", ls)
			}
			tokens := benchutil.Tokens(T, mc.VocabSize, uint64(T), 2)
			cell := Cell{Preset: preset, Tokens: T}
			var torchRes, blasRes *Result
			var torchLP []float64
			if o.python != "" {
				r, lp, version, err := runTorch(o, dir, tokens, "")
				if err != nil {
					return err
				}
				torchRes, torchLP, rep.Torch = r, lp, version
				fmt.Fprintf(os.Stderr, "%s T=%d pytorch: score %.0f tok/s, train %.0f tok/s\n", preset, T, r.Score.TokensPerSecond, r.Train.TokensPerSecond)
				if o.openBLAS != "" {
					if blasRes, _, _, err = runTorch(o, dir, tokens, o.openBLAS); err != nil {
						return err
					}
					blasRes.Score.RatioVsPyTorch = blasRes.Score.TokensPerSecond / torchRes.Score.TokensPerSecond
					blasRes.Train.RatioVsPyTorch = blasRes.Train.TokensPerSecond / torchRes.Train.TokensPerSecond
					fmt.Fprintf(os.Stderr, "%s T=%d pytorch-openblas: score %.0f tok/s, train %.0f tok/s\n", preset, T, blasRes.Score.TokensPerSecond, blasRes.Train.TokensPerSecond)
				}
			}
			for _, be := range bes {
				r, params, err := runGo(ctx, o, be, dir, tokens, torchLP)
				if err != nil {
					return fmt.Errorf("%s T=%d %s: %w", preset, T, be.name, err)
				}
				cell.Parameters = params
				if torchRes != nil {
					r.Score.RatioVsPyTorch = r.Score.TokensPerSecond / torchRes.Score.TokensPerSecond
					r.Train.RatioVsPyTorch = r.Train.TokensPerSecond / torchRes.Train.TokensPerSecond
				}
				fmt.Fprintf(os.Stderr, "%s T=%d %s: score %.0f tok/s (compile %.2fs), train %.0f tok/s (compile %.2fs), max |Δ log-prob| %.2g\n",
					preset, T, be.name, r.Score.TokensPerSecond, r.Score.CompileS, r.Train.TokensPerSecond, r.Train.CompileS, r.MaxAbsLogProbDiff)
				cell.Results = append(cell.Results, *r)
			}
			if torchRes != nil {
				cell.Results = append(cell.Results, *torchRes)
			}
			if blasRes != nil {
				cell.Results = append(cell.Results, *blasRes)
			}
			rep.Cells = append(rep.Cells, cell)
		}
	}
	rep.TotalS = time.Since(start).Seconds()
	printTables(&rep)
	if o.out == "-" {
		return nil
	}
	out := o.out
	if out == "" {
		out = filepath.Join(benchutil.CallerDir("bench/backends"), "results-"+rep.Date+".json")
	}
	js, err := json.MarshalIndent(&rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, append(js, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s (%.0fs in all)\n", out, rep.TotalS)
	return nil
}

// runGo measures scoring and one training step of the model in dir on one backend.
func runGo(ctx context.Context, o options, be backendRun, dir string, tokens []int32, torchLP []float64) (*Result, int, error) {
	T := len(tokens)
	res := &Result{Backend: be.name, Spec: be.spec}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return nil, 0, err
	}
	params := m.NumParameters()
	s, err := xla.NewScorer(be.b, m, xla.ScorerOptions{})
	if err != nil {
		return nil, 0, err
	}
	var lp []float32
	res.Score, err = measure(T, o, func(first bool) error {
		out, c, err := s.Score(ctx, tokens)
		if err != nil {
			return err
		}
		c.Close()
		if first {
			lp = out
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("score: %w", err)
	}
	for i, want := range torchLP {
		res.MaxAbsLogProbDiff = math.Max(res.MaxAbsLogProbDiff, math.Abs(float64(lp[i+1])-want))
	}

	tm, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return nil, 0, err
	}
	tr, err := xla.NewTrainer(be.b, tm, xla.TrainerOptions{})
	if err != nil {
		return nil, 0, err
	}
	r := trainRollout(tokens, tm.Config.VocabSize)
	res.Train, err = measure(T, o, func(first bool) error {
		met, err := tr.Step(ctx, []credit.Sequence{r})
		if first {
			res.TrainLoss = met.Loss
		}
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("train: %w", err)
	}
	return res, params, nil
}

// trainRollout is the training rollout: tokens, the first 16 untrainable, sampler
// log-prob −2 elsewhere, reward 1, one hinted segment [T/2, T/2+64) with a 16-token hint.
func trainRollout(tokens []int32, vocab int) credit.Sequence {
	T := len(tokens)
	r := credit.Sequence{ID: "bench", TaskID: "bench", Tokens: tokens, Sampler: make([]float64, T),
		Trainable: make([]bool, T), Reward: 1, HasReward: true,
		Hints: []credit.Hint{{InsertAt: T / 2, End: T/2 + 64, Tokens: benchutil.Tokens(16, vocab, 99, 2)}}}
	for t := range T {
		r.Sampler[t] = math.NaN()
		if t >= 16 {
			r.Trainable[t], r.Sampler[t] = true, -2
		}
	}
	return r
}

// measure runs f once as a warm-up, then up to o.reps times until the timed calls
// pass o.maxSeconds, and keeps the fastest.
func measure(T int, o options, f func(first bool) error) (Timing, error) {
	runtime.GC()
	t0 := time.Now()
	if err := f(true); err != nil {
		return Timing{}, err
	}
	tm := Timing{FirstS: time.Since(t0).Seconds(), BestS: math.Inf(1)}
	total := 0.0
	for tm.Reps < o.reps {
		runtime.GC()
		t0 := time.Now()
		if err := f(false); err != nil {
			return Timing{}, err
		}
		dt := time.Since(t0).Seconds()
		tm.BestS, total, tm.Reps = math.Min(tm.BestS, dt), total+dt, tm.Reps+1
		if total > o.maxSeconds {
			break
		}
	}
	if tm.Reps == 0 {
		tm.BestS = tm.FirstS
	}
	tm.TokensPerSecond = float64(T) / tm.BestS
	tm.CompileS = math.Max(0, tm.FirstS-tm.BestS)
	return tm, nil
}

// runTorch runs torch_bench.py on the model in dir and tokens.
// A non-empty blasDir is put on LD_LIBRARY_PATH, so torch loads that libblas.so.3.
func runTorch(o options, dir string, tokens []int32, blasDir string) (*Result, []float64, string, error) {
	tokJSON, _ := json.Marshal(tokens)
	if err := os.WriteFile(filepath.Join(dir, "tokens.json"), tokJSON, 0o644); err != nil {
		return nil, nil, "", err
	}
	cmd := exec.Command(o.python, filepath.Join(benchutil.CallerDir("bench/backends"), "torch_bench.py"), dir,
		strconv.Itoa(o.threads), strconv.Itoa(o.reps), strconv.FormatFloat(o.maxSeconds, 'g', -1, 64))
	cmd.Stderr = os.Stderr
	name, spec := "pytorch", "Debian's default libblas3 (reference BLAS)"
	if blasDir != "" {
		name, spec = "pytorch-openblas", "LD_LIBRARY_PATH="+blasDir
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+blasDir, "OPENBLAS_NUM_THREADS="+strconv.Itoa(o.threads))
	}
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, "", fmt.Errorf("%s: %w", name, err)
	}
	var ref struct {
		Torch    string    `json:"torch"`
		LogProbs []float64 `json:"logprobs"`
		Score    Timing    `json:"score"`
		Train    Timing    `json:"train"`
	}
	if err := json.Unmarshal(out, &ref); err != nil {
		return nil, nil, "", fmt.Errorf("pytorch output: %w", err)
	}
	T := float64(len(tokens))
	for _, t := range []*Timing{&ref.Score, &ref.Train} {
		t.TokensPerSecond = T / t.BestS
		t.CompileS = math.Max(0, t.FirstS-t.BestS)
		t.RatioVsPyTorch = 1
	}
	return &Result{Backend: name, Spec: fmt.Sprintf("torch %s eager, %d threads, %s", ref.Torch, o.threads, spec),
		Score: ref.Score, Train: ref.Train}, ref.LogProbs, ref.Torch, nil
}

func printTables(rep *Report) {
	fmt.Printf("%d CPUs (GOMAXPROCS %d), %s, GoMLX %s, PyTorch %s (%d threads, eager); best of ≤%d after a warm-up\n\n",
		rep.NumCPU, rep.GOMAXPROCS, rep.GoVersion, rep.GoMLX, rep.Torch, rep.TorchThread, rep.Reps)
	for _, phase := range []string{"scoring", "training"} {
		fmt.Printf("%s tokens/s:\n\n", phase)
		fmt.Println("| model | T | pure Go | XLA CPU | PyTorch CPU | pure Go / PyTorch | XLA CPU / PyTorch | PyTorch + OpenBLAS | XLA CPU / PyTorch + OpenBLAS |")
		fmt.Println("|---|---|---|---|---|---|---|---|---|")
		for _, c := range rep.Cells {
			tps := map[string]float64{}
			ratio := map[string]float64{}
			for _, r := range c.Results {
				t := r.Score
				if phase == "training" {
					t = r.Train
				}
				tps[r.Backend], ratio[r.Backend] = t.TokensPerSecond, t.RatioVsPyTorch
			}
			vsBLAS := 0.0
			if tps["pytorch-openblas"] > 0 {
				vsBLAS = tps["xla-cpu"] / tps["pytorch-openblas"]
			}
			fmt.Printf("| %s (%s params) | %d | %s | %s | %s | %s | %s | %s | %s |\n", c.Preset, human(c.Parameters), c.Tokens,
				num(tps["pure-go"], "%.0f"), num(tps["xla-cpu"], "%.0f"), num(tps["pytorch"], "%.0f"),
				num(ratio["pure-go"], "%.2f"), num(ratio["xla-cpu"], "%.2f"), num(tps["pytorch-openblas"], "%.0f"), num(vsBLAS, "%.2f"))
		}
		fmt.Println()
	}
	fmt.Println("warm-up overhead (first call − steady call, s; for XLA the compile time):")
	fmt.Println()
	fmt.Println("| model | T | pure Go score | pure Go train | XLA CPU score | XLA CPU train | PyTorch score | PyTorch train |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, c := range rep.Cells {
		cs := map[string][2]float64{}
		for _, r := range c.Results {
			cs[r.Backend] = [2]float64{r.Score.CompileS, r.Train.CompileS}
		}
		fmt.Printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", c.Preset, c.Tokens,
			cs["pure-go"][0], cs["pure-go"][1], cs["xla-cpu"][0], cs["xla-cpu"][1], cs["pytorch"][0], cs["pytorch"][1])
	}
	fmt.Println()
}

func num(v float64, f string) string {
	if v == 0 {
		return "—"
	}
	s := fmt.Sprintf(f, v)
	if strings.HasSuffix(f, ".0f") && v >= 1000 && v < 1e6 {
		n := int64(math.Round(v))
		s = fmt.Sprintf("%d,%03d", n/1000, n%1000)
	}
	return s
}

func human(n int) string {
	if n >= 1_000_000 {
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	}
	return fmt.Sprintf("%.0fk", float64(n)/1e3)
}

func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "?"
}
