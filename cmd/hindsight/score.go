package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/xla"
)

// scoresSchema is the output of `hindsight score`: per rollout its id and
// student_logprobs, entry t = log p(y_t | y_<t) in nats, null at t = 0.
var scoresSchema = arrow.NewSchema([]arrow.Field{
	{Name: "rollout_id", Type: arrow.BinaryTypes.String},
	{Name: "student_logprobs", Type: arrow.LargeListOf(arrow.PrimitiveTypes.Float32), Nullable: true},
}, nil)

// scoreCmd is `hindsight score -model DIR -in ROLLOUTS.arrow -out SCORES.arrow`.
func scoreCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight score", flag.ContinueOnError)
	fs.SetOutput(stderr)
	modelDir := fs.String("model", "", "model `directory` (config.json, safetensors, tokenizer.json)")
	in := fs.String("in", "", "rollout `file` (Arrow IPC)")
	out := fs.String("out", "", "scores `file` to write (Arrow IPC: rollout_id, student_logprobs)")
	chunk := fs.Int("chunk", xla.DefaultChunk, "positions per forward step; peak memory is the KV cache plus chunk × vocab floats")
	precision := fs.String("precision", "f32", "compute precision: f32, or bf16 (bfloat16 weights and KV cache; an XLA backend)")
	backendSpec := fs.String("backend", "", "GoMLX backend: go[:opts], xla:<absolute plugin path>, xla-cpu (default $GOMLX_BACKEND, else "+xla.DefaultBackend+")")
	compileCache := fs.String("compile-cache", "", compileCacheUsage)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsight score -model DIR -in ROLLOUTS.arrow -out SCORES.arrow [-chunk N] [-precision f32|bf16] [-backend SPEC]\n"+
			"       [-compile-cache DIR]\n\n"+
			"Scores every rollout under the model: student_logprobs[t] = log p(y_t | y_<t), null at t = 0.\n"+
			"A rollout that is invalid or longer than the model's context is reported and skipped (exit 1).\n\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr,
		cliflag.Rule{Bad: *modelDir == "", Msg: "-model DIR is required"},
		cliflag.Rule{Bad: *in == "", Msg: "-in ROLLOUTS.arrow is required"},
		cliflag.Rule{Bad: *out == "", Msg: "-out SCORES.arrow is required"},
		cliflag.NoArgs(fs)); !ok {
		return code
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "hindsight score: %v\n", err)
		return 1
	}
	backend, model, err := openModel(*backendSpec, *precision, *modelDir, *compileCache, stderr)
	if err != nil {
		return fail(err)
	}
	fingerprint := model.Tokenizer().Fingerprint()
	scorer, err := xla.NewScorer(backend, model, xla.ScorerOptions{Chunk: *chunk})
	if err != nil {
		return fail(err)
	}
	r, err := rollout.OpenReader(*in, rollout.ReadOptions{VocabSize: model.Config.VocabSize, Tokenizer: fingerprint})
	if err != nil {
		return fail(err)
	}
	defer r.Close()

	b := array.NewRecordBuilder(memory.DefaultAllocator, scoresSchema)
	defer b.Release()
	ids := b.Field(0).(*array.StringBuilder)
	lists := b.Field(1).(*array.LargeListBuilder)
	vals := lists.ValueBuilder().(*array.Float32Builder)
	var scored, skipped, tokens int
	start := time.Now()
	for r.Next() {
		ro := r.Rollout()
		if ps := r.Problems(); ps != nil {
			for _, p := range ps {
				fmt.Fprintf(stderr, "skip row %d: %v\n", r.Row(), p)
			}
			skipped++
			continue
		}
		t0 := time.Now()
		lp, cache, err := scorer.Score(ctx, ro.Tokens)
		if err != nil {
			if ctx.Err() != nil {
				return fail(ctx.Err())
			}
			fmt.Fprintf(stderr, "skip rollout %s (row %d): %v\n", ro.ID, r.Row(), err)
			skipped++
			continue
		}
		cache.Close()
		ids.Append(ro.ID)
		lists.Append(true)
		for i, x := range lp {
			if i == 0 || math.IsNaN(float64(x)) {
				vals.AppendNull()
			} else {
				vals.Append(x)
			}
		}
		scored++
		tokens += len(ro.Tokens)
		took := time.Since(t0)
		fmt.Fprintf(stderr, "scored %s: %d tokens in %v (%.0f tokens/s); total %d rollouts, %d tokens, %.0f tokens/s\n",
			ro.ID, len(ro.Tokens), took.Round(time.Millisecond), float64(len(ro.Tokens))/took.Seconds(),
			scored, tokens, float64(tokens)/time.Since(start).Seconds())
	}
	if err := r.Err(); err != nil {
		return fail(err)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	err = fsutil.WriteFile(*out, 0o644, func(w io.Writer) error {
		fw, err := ipc.NewFileWriter(w, ipc.WithSchema(scoresSchema), ipc.WithAllocator(memory.DefaultAllocator))
		if err != nil {
			return err
		}
		if err := fw.Write(rec); err != nil {
			fw.Close()
			return err
		}
		return fw.Close()
	})
	if err != nil {
		return fail(fmt.Errorf("write scores: %w", err))
	}
	fmt.Fprintf(stdout, "%s: %d rollouts scored, %d skipped, %d tokens in %v (%.0f tokens/s)\n", *out, scored, skipped, tokens,
		time.Since(start).Round(time.Millisecond), float64(tokens)/time.Since(start).Seconds())
	if *compileCache != "" {
		fmt.Fprint(stderr, compileSummary(*compileCache))
	}
	if skipped > 0 {
		return 1
	}
	return 0
}
