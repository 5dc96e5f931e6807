// Command realprobe runs protocol 3's G1 and G2 probes with a real instruct model
// playing the task world in its own chat template (docs/experiments/protocol3.md, "A
// real model's data point"; scripts/real_model_probe.sh converts the model and runs
// it):
//
//	go run ./bench/efficacy/realprobe -model MODEL_DIR -slips 48 -out bench/efficacy/protocol3/realmodel.json
//
// The slips are scripted (protocol3.RealSlips) on held-out tasks' solution paths; the
// model is scored and decoded by hindsight's own Scorer and Sampler.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/protocol3"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

var start = time.Now()

func progress(line string) {
	fmt.Fprintf(os.Stderr, "[%6.0fs] %s\n", time.Since(start).Seconds(), line)
}

func main() {
	model := flag.String("model", "", "Hugging Face model directory (required)")
	n := flag.Int("slips", 48, "slips to probe, one per held-out task in order")
	seed := flag.Uint64("seed", 27, "seed of the slips")
	maxNew := flag.Int("max-new", 20, "most tokens of a greedy reply")
	backendSpec := flag.String("backend", "xla-cpu", "GoMLX backend: xla-cpu, go, xla:<plugin path>")
	dump := flag.String("dump", "", "write the first -slips slips' conversations, ids and actions to this JSON file (tokenizer and template only, no model run) and exit")
	resum := flag.Bool("resummarize", false, "read -out, recompute its summary from its items (no model run), rewrite it and print the tables")
	saveEvery := flag.Int("save-every", 5, "write -out after every this many slips (a stopped run keeps them)")
	out := flag.String("out", "", "write the results here as JSON (default: stdout only)")
	flag.Parse()
	if *resum {
		if err := resummarize(*out); err != nil {
			fatal(err)
		}
		return
	}
	if *model == "" {
		fatal(fmt.Errorf("-model is required"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	backend, err := xla.NewBackend(xla.ResolveBackend(*backendSpec, ""))
	if err != nil {
		fatal(err)
	}
	held, err := toolworld.Tasks(toolworld.SplitHeldout, 0)
	if err != nil {
		fatal(err)
	}
	slips, err := protocol3.RealSlips(held, *n, *seed)
	if err != nil {
		fatal(err)
	}
	if *dump != "" {
		if err := dumpSlips(*model, slips, *dump); err != nil {
			fatal(err)
		}
		return
	}
	progress(fmt.Sprintf("%d slips on held-out tasks %s … %s", len(slips), slips[0].TaskID, slips[len(slips)-1].TaskID))
	command := "go run ./bench/efficacy/realprobe " + strings.Join(os.Args[1:], " ")
	save := func(res protocol3.RealProbeResult) error {
		res.Command = command
		if *out == "" {
			return nil
		}
		b, err := json.MarshalIndent(res, "", " ")
		if err != nil {
			return err
		}
		if err := fsutil.WriteFileBytes(*out, append(b, '\n'), 0o644); err != nil {
			return err
		}
		progress(fmt.Sprintf("wrote %s (%d slips)", *out, res.Slips))
		return nil
	}
	res, err := protocol3.RealProbe(ctx, backend, *model, slips, *maxNew, *saveEvery, save, progress)
	if err != nil {
		fatal(err)
	}
	fmt.Print(res.Table())
}

// resummarize rewrites the results at path with their summary recomputed.
func resummarize(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res protocol3.RealProbeResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	res.Resummarize()
	if b, err = json.MarshalIndent(res, "", " "); err != nil {
		return err
	}
	fmt.Print(res.Table())
	return fsutil.WriteFileBytes(path, append(b, '\n'), 0o644)
}

// dumpSlips writes slips' conversations (protocol3.RealChat.Dump) to path.
func dumpSlips(model string, slips []protocol3.RealSlip, path string) error {
	md, err := data.OpenModelDir(model)
	if err != nil {
		return err
	}
	tok := md.Tokenizer
	md.Close()
	chat, err := protocol3.NewRealChat(model, tok)
	if err != nil {
		return err
	}
	var all []protocol3.RealDump
	for _, s := range slips {
		d, err := chat.Dump(s)
		if err != nil {
			return err
		}
		all = append(all, d...)
	}
	b, err := json.MarshalIndent(all, "", " ")
	if err != nil {
		return err
	}
	return fsutil.WriteFileBytes(path, append(b, '\n'), 0o644)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "realprobe:", err)
	os.Exit(1)
}
