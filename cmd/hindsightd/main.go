// Command hindsightd is the hindsight trainer daemon: it watches a spool of agent
// rollout files, validates and journals every rollout exactly once, and reports its
// state through a protobuf status service. See docs/running.md for configuration.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/daemon"
	"github.com/hindsight-ai/hindsight/internal/buildinfo"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
	"github.com/hindsight-ai/hindsight/xla"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsightd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "YAML config `file`; without it the embedded defaults apply")
	dataDir := fs.String("data-dir", "", "data `directory` (overrides data_dir)")
	listen := fs.String("listen", "", "status `address` HOST:PORT (overrides listen)")
	printConfig := fs.Bool("print-config", false, "print the effective config, defaults included, and exit")
	demo := fs.Bool("demo", false, "synthesize a few rollouts into the spool, process them, print a summary and exit")
	loopMode := fs.Bool("loop", false, "also sample task-world rollouts with the newest checkpoint into the spool (collector in this process) and evaluate every checkpoint")
	loopSteps := fs.Int64("loop-steps", 0, "with -loop: stop once the checkpoint of this `step` is evaluated (0: until interrupted)")
	loopGroup := fs.Int("loop-group", 8, "with -loop: rollouts per task (G)")
	loopSeed := fs.Uint64("loop-seed", 1, "with -loop: the collector's sampling seed")
	version := fs.Bool("version", false, "print the version and exit")
	backend := fs.String("backend", "", "GoMLX backend `spec` (overrides backend:; auto, go:parallelism=-1, xla-cpu, xla:/abs/pjrt_c_api_cpu_plugin.so; default $GOMLX_BACKEND, else auto)")
	resumeFrom := fs.Int64("resume-from", -1, "restore the checkpoint of this `step` instead of the newest")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: hindsightd [-config FILE] [-data-dir DIR] [-listen ADDR] [-backend SPEC] [-resume-from STEP] [-demo | -loop [-loop-steps N]] [-print-config]\n\n")
		fs.PrintDefaults()
	}
	if code, ok := cliflag.Run(fs, args, stderr); !ok {
		return code
	}
	if code, ok := cliflag.Check(fs, stderr, cliflag.NoArgs(fs)); !ok {
		return code
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Version())
		return 0
	}

	if *demo && *loopMode {
		fmt.Fprintln(stderr, "hindsightd: -demo and -loop do not go together")
		return 2
	}
	// A mode's own settings are its defaults: the config file goes on top of them,
	// so what the file sets wins and what it leaves out keeps the mode's value.
	cfg := daemon.DefaultConfig()
	switch {
	case *demo:
		cfg = demoConfig(cfg)
	case *loopMode:
		cfg = loopConfig(cfg)
	}
	if *configPath != "" {
		var err error
		if cfg, err = daemon.LoadConfigOver(*configPath, cfg); err != nil {
			fmt.Fprintf(stderr, "hindsightd: %v\n", err)
			return 2
		}
	}
	if *loopMode {
		if err := checkLoopConfig(cfg, *loopSteps); err != nil {
			fmt.Fprintf(stderr, "hindsightd: %v\n", err)
			return 2
		}
	}
	if *dataDir != "" {
		cfg.DataDir = *dataDir
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "hindsightd: config: %v\n", err)
		return 2
	}
	if *printConfig {
		b, err := cfg.YAML()
		if err != nil {
			fmt.Fprintf(stderr, "hindsightd: %v\n", err)
			return 1
		}
		stdout.Write(b)
		return 0
	}

	logCfg := cfg.Log
	if *demo && *configPath == "" {
		logCfg.Level = "error" // the demo's progress lines tell the story
	}
	log := daemon.NewLogger(logCfg, stderr)

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills at once
	exitAtShutdownTimeout(ctx, cfg.ShutdownTimeout, log)

	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	opts := daemon.Options{Version: buildinfo.Version(), Log: log, Backend: *backend, ResumeFrom: *resumeFrom,
		ConfigPath: *configPath, Reload: hup}
	var err error
	switch {
	case *demo:
		err = runDemo(ctx, cfg, opts, stdout)
	case *loopMode:
		err = runLoop(ctx, cfg, opts, loopOptions{steps: *loopSteps, group: *loopGroup, seed: *loopSeed,
			backend: xla.ChooseBackend(*backend, cfg.Backend, xla.AutoBackend).Spec}, stdout)
	default:
		err = daemon.Run(ctx, cfg, opts)
	}
	if err != nil {
		log.Error().Err(err).Msg("hindsightd exiting")
		if *demo {
			fmt.Fprintf(stderr, "hindsightd: %v\n", err)
		}
		return 1
	}
	return 0
}

// exitAtShutdownTimeout ends the process once timeout has passed since ctx ended (the
// first SIGTERM or SIGINT), should the run not have returned by then. It never fires
// in a stop that works as designed: the daemon abandons the work in hand before the
// timeout (an uninterruptible device step is left running) and closes within it
// (docs/running.md "Stopping"). If something else hangs, exiting here is as safe as
// a kill: the journal and the ledger replay to the same state on the next start.
func exitAtShutdownTimeout(ctx context.Context, timeout time.Duration, log zerolog.Logger) {
	context.AfterFunc(ctx, func() {
		time.AfterFunc(timeout, func() {
			log.Error().Stringer("shutdown_timeout", timeout).
				Msg("still running at the shutdown timeout: exiting now; the work in hand resumes on restart")
			os.Exit(1)
		})
	})
}
