// Command efficacy runs the efficacy experiment of issue 17 on the bundled task world:
// does hint credit learn faster than outcome-only?
//
//	go run ./bench/efficacy -warmstart -backend xla-cpu   # the committed warm start (SFT)
//	go run ./bench/efficacy -probe 80 -backend xla-cpu    # each hint setup's Δ on the warm start, no training
//	go run ./bench/efficacy -backend xla-cpu              # the arms, then results.json, efficacy.png
//
// Protocol 3 (docs/experiments/protocol3.md) measures gates before any arm:
//
//	go run ./bench/efficacy -warmstart3 -backend xla-cpu -dir bench/efficacy/protocol3  # its warm start
//	go run ./bench/efficacy -gates -backend xla-cpu -dir bench/efficacy/protocol3       # G1–G3 → results.json
//	go run ./bench/efficacy -diagnose-paths chainset -dir bench/efficacy/protocol3  # where greedy episodes fail
//	go run ./bench/efficacy -pilot -backend xla-cpu -dir bench/efficacy/protocol3       # G4 and the arms' rate → results.json
//	go run ./bench/efficacy -arms3 -backend xla-cpu -dir bench/efficacy/protocol3       # the arms → DIR/arms, only when G1–G4 pass
//
// The defaults are protocol 2's (docs/experiments/protocol2.md); protocol 1 ran with -steps 8
// -eval-every 4 -hints generic,failed,student.
//
// Every arm starts from the warm start under bench/efficacy/warmstart/model; arms run
// one after another with equal seeds, tasks, budgets, temperature, eval cadence and
// hyperparameters, only the credit differing. Progress goes to stderr, one line per
// eval.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/protocol3"
	"github.com/hindsight-ai/hindsight/xla"
)

var start = time.Now()

func progress(line string) {
	fmt.Fprintf(os.Stderr, "[%6.0fs] %s\n", time.Since(start).Seconds(), line)
}

func main() {
	def := efficacy.DefaultConfig()
	ws := efficacy.DefaultWarmStart()
	warm := flag.Bool("warmstart", false, "train the warm start (SFT on noisy demonstrations with hint turns) instead of running the arms")
	preset := flag.String("preset", "mid", "model of the warm start: tiny, mid (tiny at hidden 128) or small")
	wsFrom := flag.String("warmstart-from", "", "continue the warm start from this model directory instead of a fresh model")
	wsSteps := flag.Int("warmstart-steps", ws.Steps, "most SFT steps of the warm start")
	backendSpec := flag.String("backend", "xla-cpu", "GoMLX backend: xla-cpu, go, xla:<plugin path>")
	dir := flag.String("dir", "bench/efficacy", "where the warm start is read (DIR/warmstart/model) and results are written")
	arms := flag.String("arms", strings.Join(def.Arms, ","), "arms to run, comma-separated: outcome, hint, hint-only")
	seeds := flag.Int("seeds", len(def.Seeds), "seeds per arm (1..N)")
	steps := flag.Int("steps", def.Steps, "training steps per run")
	tasks := flag.Int("tasks", def.TasksPerStep, "train tasks per step")
	group := flag.Int("group", def.Group, "rollouts per task (G)")
	evalEvery := flag.Int("eval-every", def.EvalEvery, "steps between held-out evals")
	evalTasks := flag.Int("eval-tasks", def.EvalTasks, "held-out tasks per eval (the split has 250)")
	lrs := flag.String("lrs", "", "learning-rate sweep grid, comma-separated: runs every arm at each on the validation split (seed 1) and picks the best mean final success; empty: -lr")
	temp := flag.Float64("temperature", def.Temperature, "sampling temperature of the training rollouts (evals are greedy)")
	sweepSteps := flag.Int("sweep-steps", 0, "training steps of each sweep run (0: -steps)")
	lr := flag.Float64("lr", def.LR, "learning rate of every arm")
	out := flag.String("out", "", "results directory (default -dir)")
	probe := flag.Int("probe", 0, "probe the warm start instead: sample this many train tasks × -group rollouts and measure each hint setup's Δ on right and wrong actions (no training)")
	hints := flag.String("hints", def.Hints.String(), "hint setup of the hint arms: RULES,PLACE,BASE with RULES generic (protocol 1) or world, PLACE failed (protocol 1) or retry, BASE student (protocol 1) or empty_hint")
	warm3 := flag.Bool("warmstart3", false, "train protocol 3's warm start (DIR/warmstart/model, from -warmstart-from or protocol 1's warm start) instead of running the arms")
	split := flag.Bool("probe-split", false, "diagnose G2 (efficacy.ProbeSplit) on DIR/warmstart/model (or -probe-split-model) and write DIR/probe_split.json")
	splitModel := flag.String("probe-split-model", "", "the model directory -probe-split diagnoses (default DIR/warmstart/model)")
	splitVal := flag.Int("probe-split-validation", 0, "with -probe-split: probe the first N validation tasks (the warm start's margin evals' episodes) instead of the held-out split, into DIR/probe_split_validation.json")
	paths := flag.String("diagnose-paths", "", "comma-separated task families: play greedy held-out episodes of these with DIR/warmstart/model (or -diagnose-paths-model) and write where the failures left the solution's path to DIR/path_diagnosis.json (protocol3.DiagnosePaths)")
	pathsModel := flag.String("diagnose-paths-model", "", "the model directory -diagnose-paths plays (default DIR/warmstart/model)")
	gates := flag.Bool("gates", false, "measure protocol 3's gates G1–G3 of DIR/warmstart/model and write DIR/results.json")
	gateGroups := flag.Int("gate-groups", 64, "train tasks of G3's mixed-group measure (G = 8 each)")
	ws3Budget := flag.Duration("warmstart3-budget", protocol3.DefaultWarmStart().WallBudget, "wall-time budget of protocol 3's warm start")
	ws3Own := flag.Float64("warmstart3-own", protocol3.DefaultWarmStart().Demo.Own, "share of the demonstrations' slips of the model's own kinds (protocol3.OwnSlip)")
	ws3Hint := flag.Float64("warmstart3-hint-rate", protocol3.DefaultWarmStart().Demo.HintRate, "share of the demonstrations' slips followed by a hint turn")
	ws3Steps := flag.Int("warmstart3-steps", protocol3.DefaultWarmStart().Steps, "most SFT steps of protocol 3's warm start")
	ws3LR := flag.Float64("warmstart3-lr", protocol3.DefaultWarmStart().LR, "AdamW learning rate of protocol 3's warm start")
	ws3Every := flag.Int("warmstart3-eval-every", protocol3.DefaultWarmStart().EvalEvery, "steps between validation evals of protocol 3's warm start")
	ws3Patience := flag.Int("warmstart3-patience", protocol3.DefaultWarmStart().Patience, "evals without a better checkpoint (protocol3.GateBetter) before protocol 3's warm start stops")
	ws3Grow := flag.Int("warmstart3-grow-layers", 0, "grow the -warmstart-from model to this many layers before protocol 3's warm start (protocol3.GrowLayers: new layers appended, their o_proj and down_proj at zero, so the grown model computes what the original does); 0: no growth")
	ws3Copy := flag.Int("warmstart3-copy", 0, "rollouts of each 32-rollout batch from the copy curriculum (protocol3.CopyDemos, attempt 5: 16); 0: none")
	ws3Sibling := flag.Bool("warmstart3-sibling-copy", false, "with -warmstart3-copy: add the sibling copy curriculum (protocol3.SiblingCopyDemos: a sibling turn showing the right call or an alternative, then that call), its groups pooled with the hint's")
	ws3SibShare := flag.Float64("warmstart3-sibling-share", 0, "with -warmstart3-sibling-copy: pool only this share of the sibling groups (protocol3.CopyConfig.SiblingShare, the first by task; attempt 9d: 0.2); 0: all")
	ws3Key := flag.Bool("warmstart3-key-copy", false, "with -warmstart3-copy: add the key copy curriculum (protocol3.KeyCopyDemos: chain and chainset prompts that differ only in the key they name, then that key's get or set), its groups pooled with the hint's")
	ws3Margin := flag.Int("warmstart3-margin-tasks", 0, "validation tasks on which every eval measures ProbeSplit's deciding-token margin (attempt 5: 100); 0: not measured")
	ws3Families := flag.String("warmstart3-world-families", "", "comma-separated task families: draw the world demonstrations of protocol 3's warm start from these only (protocol3.KeepFamilies; attempt 7: chain,chainset,store); empty: every family")
	ws3Seed := flag.Uint64("warmstart3-seed", protocol3.DefaultWarmStart().Seed, "seed of protocol 3's warm start: its demonstrations' and copy curriculum's draws, batch order and trainer")
	ws3KeepHint := flag.Bool("warmstart3-keep-hint", false, "keep the best eval by protocol3.GateBetter in the band (inside it, then the higher next-call rate after a hinted slip) and stop only at protocol3.GateProxy, the step cap or the budget (attempt 10)")
	ws3Val := flag.Int("warmstart3-val-tasks", protocol3.DefaultWarmStart().ValTasks, "validation tasks of every eval of protocol 3's warm start, the first of the split's 200 (attempt 10: 200)")
	ws3Band := flag.String("warmstart3-band", "", "lo,hi: the validation success band (fractions) that keeping and stopping aim at (protocol3.Band; attempt 10: 0.33,0.41); empty: G3's 0.30,0.45")
	ws3BandMix := flag.Bool("warmstart3-band-mix", false, "the band reads validation success weighted to the held-out split's family mix (protocol3.MixSuccess) in place of the raw rate")
	ws3KeepMargin := flag.Bool("warmstart3-keep-margin", false, "keep the best eval by protocol3.MarginBetter (inside G3's band, then the larger margin) and stop only at protocol3.GateProxy, the step cap or the budget (attempt 5)")
	seedList := flag.String("seed-list", "", "the seeds of -pilot's first and -arms3's runs, comma-separated (e.g. 101,102,103: seeds no one has looked at; each seed fixes its train tasks and sampling); overrides -seeds")
	world3 := flag.Bool("world3", false, "run the arms in protocol 3's world (320 tokens, 8 calls) instead of protocol 2's")
	evalSplit := flag.String("eval-split", def.EvalSplit, "split of the arms' evals: heldout, or validation for a pilot")
	replot := flag.Bool("replot", false, "read DIR/results.json, summarize its runs again and rewrite the plots and table")
	pilot := flag.Bool("pilot", false, "protocol 3's G4: outcome-only with seed 1 on the validation split at each rate of -pilot-lrs; adds G4 and the chosen rate to DIR/results.json")
	pilotLRs := flag.String("pilot-lrs", "3e-4,1e-3,3e-3", "the pilot's learning rates, comma-separated")
	arms3 := flag.Bool("arms3", false, "protocol 3's arms (outcome, sdpo, hint, placebo) into -out (default DIR/arms) at the pilot's learning rate (-lr is ignored); refused unless DIR/results.json records G1–G4 passed on DIR/warmstart/model")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *replot {
		res, err := efficacy.ReadResults(filepath.Join(*dir, "results.json"))
		if err == nil {
			err = res.Write(*dir)
		}
		if err != nil {
			fatal(err)
		}
		fmt.Print(res.Table())
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	backend, err := xla.NewBackend(xla.ResolveBackend(*backendSpec, ""))
	if err != nil {
		fatal(err)
	}
	model := filepath.Join(*dir, "warmstart", "model")
	if *warm3 {
		cfg := protocol3.DefaultWarmStart()
		cfg.Steps, cfg.WallBudget, cfg.Demo.Own, cfg.Demo.HintRate = *ws3Steps, *ws3Budget, *ws3Own, *ws3Hint
		cfg.LR, cfg.EvalEvery, cfg.Patience, cfg.GrowLayers = *ws3LR, *ws3Every, *ws3Patience, *ws3Grow
		if *ws3Copy > 0 {
			cfg.Copy = protocol3.DefaultCopy()
			cfg.Copy.PerBatch = *ws3Copy
			cfg.Copy.Sibling, cfg.Copy.SiblingShare, cfg.Copy.Key = *ws3Sibling, *ws3SibShare, *ws3Key
			if *ws3SibShare < 0 || *ws3SibShare > 1 || (*ws3SibShare > 0 && !*ws3Sibling) {
				fatal(fmt.Errorf("-warmstart3-sibling-share %v: needs -warmstart3-sibling-copy and a share in [0, 1]", *ws3SibShare))
			}
		} else if *ws3Sibling || *ws3Key {
			fatal(fmt.Errorf("-warmstart3-sibling-copy and -warmstart3-key-copy need -warmstart3-copy > 0"))
		}
		cfg.MarginTasks, cfg.KeepByMargin, cfg.Seed, cfg.ValTasks = *ws3Margin, *ws3KeepMargin, *ws3Seed, *ws3Val
		if *ws3Band != "" {
			if cfg.Band, err = protocol3.ParseBand(*ws3Band); err != nil {
				fatal(fmt.Errorf("-warmstart3-band: %w", err))
			}
		} else if *ws3BandMix {
			cfg.Band = protocol3.G3Band
		}
		cfg.Band.Mix, cfg.KeepByHint = *ws3BandMix, *ws3KeepHint
		if cfg.KeepByHint && cfg.KeepByMargin {
			fatal(fmt.Errorf("-warmstart3-keep-hint and -warmstart3-keep-margin: choose one keeping rule"))
		}
		if *ws3Families != "" {
			cfg.WorldFamilies = strings.Split(*ws3Families, ",")
		}
		from := *wsFrom
		if from == "" {
			from = "bench/efficacy/warmstart/model"
		}
		if err := warmStart3(ctx, backend, *dir, from, cfg); err != nil {
			fatal(err)
		}
		return
	}
	if *split {
		m := *splitModel
		if m == "" {
			m = model
		}
		if err := probeSplit(ctx, backend, *dir, m, *splitVal); err != nil {
			fatal(err)
		}
		return
	}
	if *paths != "" {
		m := *pathsModel
		if m == "" {
			m = model
		}
		if err := diagnosePaths(ctx, backend, *dir, m, strings.Split(*paths, ",")); err != nil {
			fatal(err)
		}
		return
	}
	if *gates {
		if err := gates3(ctx, backend, *dir, *gateGroups); err != nil {
			fatal(err)
		}
		return
	}
	if *pilot || *arms3 {
		cfg := protocol3.Config()
		cfg.Model = model
		// Overrides for trying the command out; the pre-registered run sets none.
		override := func(name string, dst *int, v int) {
			if set[name] {
				*dst = v
			}
		}
		override("steps", &cfg.Steps, *steps)
		override("tasks", &cfg.TasksPerStep, *tasks)
		override("group", &cfg.Group, *group)
		override("eval-every", &cfg.EvalEvery, *evalEvery)
		override("eval-tasks", &cfg.EvalTasks, *evalTasks)
		if set["seeds"] {
			cfg.Seeds = cfg.Seeds[:0]
			for i := 1; i <= *seeds; i++ {
				cfg.Seeds = append(cfg.Seeds, int64(i))
			}
		}
		if *seedList != "" {
			list, err := efficacy.ParseSeeds(*seedList)
			if err != nil {
				fatal(fmt.Errorf("-seed-list: %w", err))
			}
			cfg.Seeds = list
		}
		if set["arms"] {
			cfg.Arms = strings.Split(*arms, ",")
		}
		var err error
		if *pilot {
			err = runPilot(ctx, backend, cfg, *pilotLRs, *dir)
		} else {
			if *out == "" {
				*out = filepath.Join(*dir, "arms")
			}
			err = runArms3(ctx, backend, cfg, *dir, *out)
		}
		if err != nil {
			fatal(err)
		}
		return
	}
	if *warm {
		ws.Steps = *wsSteps
		if err := warmStart(ctx, backend, model, *preset, *wsFrom, ws); err != nil {
			fatal(err)
		}
		return
	}
	if *out == "" {
		*out = *dir
	}
	if *probe > 0 {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			fatal(err)
		}
		if err := runProbe(ctx, backend, model, def.World, *probe, *group, *temp, filepath.Join(*out, "probe.txt")); err != nil {
			fatal(err)
		}
		return
	}
	cfg := def
	if cfg.Hints, err = efficacy.ParseHintSetup(*hints); err != nil {
		fatal(fmt.Errorf("-hints: %w", err))
	}
	cfg.Model, cfg.Arms, cfg.Steps, cfg.TasksPerStep, cfg.Group = model, strings.Split(*arms, ","), *steps, *tasks, *group
	cfg.EvalEvery, cfg.EvalTasks, cfg.LR, cfg.Temperature, cfg.EvalSplit = *evalEvery, *evalTasks, *lr, *temp, *evalSplit
	if *world3 {
		cfg.World = protocol3.World()
	}
	cfg.Seeds = cfg.Seeds[:0]
	for i := 1; i <= *seeds; i++ {
		cfg.Seeds = append(cfg.Seeds, int64(i))
	}
	if err := runArms(ctx, backend, cfg, *lrs, *sweepSteps, *out); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench/efficacy:", err)
	os.Exit(1)
}
