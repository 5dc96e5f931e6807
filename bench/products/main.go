// Command products measures the matrix products of a scoring chunk on their own:
// GFLOP per CPU-second of each product shape on a GoMLX backend (on XLA CPU, the
// plugin's GEMM library: YNNPACK by default, oneDNN, XNNPACK or Eigen by XLA_FLAGS)
// and, with -python, of PyTorch (MKL) on the same shapes, and their ratio. It
// separates the speed of the product kernels from everything else a scoring pass
// does (docs/performance.md "What bounds 8 × 256").
//
//	go run ./bench/products -backend xla-cpu -python VENV/bin/python
//	taskset -c 0 go run ./bench/products -backend xla-cpu -python VENV/bin/python -threads 1
//
// Each shape runs reps products in one program (the input shifted by a different
// constant each time so that none is merged, each product summed to a scalar); the
// peer does the same work in eager PyTorch. Each side is the best of 3 calls after a
// warm-up, by the process's CPU time. A benchmark, not a test.
package main

import (
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

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"

	"github.com/hindsight-ai/hindsight/internal/benchutil"
	"github.com/hindsight-ai/hindsight/xla"
)

// product is one shape: batch × ([m, k] · [k, n]); a batch of 1 is a projection
// x·Wᵀ with W [n, k] as transformers stores it, a larger batch attention's batched
// product [b, m, k]·[b, k, n].
type product struct {
	Name       string `json:"name"`
	B, M, K, N int
	Reps       int `json:"reps"`
}

// flops is the product's floating-point operations, all reps.
func (p product) flops() float64 { return 2 * float64(p.B*p.M*p.K*p.N*p.Reps) }

// scoringProducts are SmolLM2-135M's products in a 256-position scoring chunk.
var scoringProducts = []product{
	{"q, o: 256×576·576", 1, 256, 576, 576, 30},
	{"k, v: 256×576·192", 1, 256, 576, 192, 60},
	{"q+k+v fused: 256×576·960", 1, 256, 576, 960, 30},
	{"gate, up: 256×576·1536", 1, 256, 576, 1536, 30},
	{"gate+up fused: 256×576·3072", 1, 256, 576, 3072, 15},
	{"down: 256×1536·576", 1, 256, 1536, 576, 30},
	{"head: 256×576·49152", 1, 256, 576, 49152, 2},
	{"head block: 256×576·4096", 1, 256, 576, 4096, 24},
	{"scores, half: 3×384×64·128", 3, 384, 64, 128, 60},
	{"values, half: 3×384×128·64", 3, 384, 128, 64, 60},
	{"square 1024³", 1, 1024, 1024, 1024, 4},
}

func main() {
	backendSpec := flag.String("backend", "", "GoMLX backend (default as hindsight: $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	python := flag.String("python", "", "python with torch: also time PyTorch on the same shapes")
	threads := flag.Int("threads", runtime.NumCPU(), "PyTorch threads")
	jsonOut := flag.String("json", "", "also write the results to `FILE` (JSON)")
	flag.BoolVar(&weightsKN, "kn", false, "projections with W stored [k, n] (x·W) instead of transformers' [n, k] (x·Wᵀ)")
	rows := flag.Int("rows", 256, "rows of each projection (the chunk's positions; reps scale by 256/rows so the work stays the same): more rows pack each weight for more of them")
	flag.Parse()
	if *rows != 256 {
		for i, p := range scoringProducts {
			if p.B == 1 && p.M == 256 {
				p.Name = strings.Replace(p.Name, "256×", strconv.Itoa(*rows)+"×", 1)
				p.M, p.Reps = *rows, max(1, p.Reps*256 / *rows)
				scoringProducts[i] = p
			}
		}
	}
	if err := run(*backendSpec, *python, *threads, *jsonOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench/products:", err)
		os.Exit(1)
	}
}

func run(backendSpec, python string, threads int, jsonOut string) error {
	name := xla.ResolveBackend(backendSpec, "")
	backend, err := xla.NewBackend(name)
	if err != nil {
		return err
	}
	goSec := make([]float64, len(scoringProducts))
	for i, p := range scoringProducts {
		if goSec[i], err = timeProduct(backend, p); err != nil {
			return fmt.Errorf("%s: %w", p.Name, err)
		}
	}
	var peer []float64
	if python != "" {
		spec, _ := json.Marshal(scoringProducts)
		cmd := exec.Command(python, filepath.Join(benchutil.CallerDir("bench/products"), "products.py"), strconv.Itoa(threads), string(spec))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("pytorch: %w", err)
		}
		if err := json.Unmarshal(out, &peer); err != nil || len(peer) != len(scoringProducts) {
			return fmt.Errorf("pytorch output %q: %v", out, err)
		}
	}
	fmt.Printf("GFLOP per CPU-second, %s (XLA_FLAGS=%q), %d CPUs\n", name, os.Getenv("XLA_FLAGS"), runtime.NumCPU())
	type row struct {
		product
		GoGFLOPS   float64 `json:"go_gflop_per_cpu_s"`
		PeerGFLOPS float64 `json:"pytorch_gflop_per_cpu_s,omitempty"`
	}
	var rows []row
	for i, p := range scoringProducts {
		r := row{product: p, GoGFLOPS: p.flops() / goSec[i] / 1e9}
		line := fmt.Sprintf("%-30s go %6.1f", p.Name, r.GoGFLOPS)
		if peer != nil {
			r.PeerGFLOPS = p.flops() / peer[i] / 1e9
			line += fmt.Sprintf("   pytorch %6.1f   go/pytorch %.2f", r.PeerGFLOPS, r.GoGFLOPS/r.PeerGFLOPS)
		}
		fmt.Println(line)
		rows = append(rows, r)
	}
	return benchutil.WriteJSON(jsonOut, map[string]any{"args": os.Args[1:], "backend": name, "xla_flags": os.Getenv("XLA_FLAGS"), "products": rows})
}

// weightsKN stores a projection's W as [k, n] (-kn): x·W, no transposition for the
// GEMM library to make.
var weightsKN bool

// timeProduct returns the least CPU seconds of 3 calls of p's program.
func timeProduct(backend backends.Backend, p product) (float64, error) {
	exec, err := NewExec(backend, func(x, w *Node) *Node {
		var sum *Node
		for r := range p.Reps {
			xr := AddScalar(x, float64(r)*1e-7)
			var y *Node
			if p.B == 1 && weightsKN {
				y = DotGeneral(xr, []int{1}, nil, w, []int{0}, nil) // [m, k]·[k, n]
			} else if p.B == 1 {
				y = DotGeneral(xr, []int{1}, nil, w, []int{1}, nil) // [m, k]·[n, k]ᵀ
			} else {
				y = DotGeneral(xr, []int{2}, []int{0}, w, []int{1}, []int{0}) // [b, m, k]·[b, k, n]
			}
			if s := ReduceAllSum(y); sum == nil {
				sum = s
			} else {
				sum = Add(sum, s)
			}
		}
		return sum
	})
	if err != nil {
		return 0, err
	}
	// Not finalized: the XLA CPU plugin aborts destroying a oneDNN executable
	// (object_pool.h "available_.size() == num_created_"); the process ends soon.
	xs, ws := shapes.Make(dtypes.Float32, p.M, p.K), shapes.Make(dtypes.Float32, p.N, p.K)
	if weightsKN {
		ws = shapes.Make(dtypes.Float32, p.K, p.N)
	}
	if p.B > 1 {
		xs, ws = shapes.Make(dtypes.Float32, p.B, p.M, p.K), shapes.Make(dtypes.Float32, p.B, p.K, p.N)
	}
	x, w := tensors.FromShape(xs), tensors.FromShape(ws)
	best := math.Inf(1)
	for i := range 4 { // a warm-up (the compile), then 3
		c0 := benchutil.CPUTime()
		out, err := exec.Exec(x, w)
		if err != nil {
			return 0, err
		}
		out[0].FinalizeAll()
		if i > 0 {
			best = min(best, (benchutil.CPUTime() - c0).Seconds())
		}
	}
	return best, nil
}
