package collect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// Options configure a collector.
type Options struct {
	// ModelDir is the initial policy (an HF model directory), used until a checkpoint
	// exists under Checkpoints.
	ModelDir string
	// Checkpoints is the checkpoint root whose `latest` link the collector follows,
	// reloading the policy when it moves; empty: never reload.
	Checkpoints string
	// Out is the spool's incoming/ folder: each file is written as name.arrow.tmp,
	// fsynced and renamed, as docs/design.md asks of collectors.
	Out string
	// Backend is the compute backend spec (xla.ResolveBackend's flag argument).
	Backend string
	// Split is the task split sampled from (default train); StartTask its first index.
	Split     string
	StartTask int
	// TasksPerFile is the tasks per rollout file (default 2): a file holds
	// TasksPerFile·Group rollouts, each task a group for the outcome baseline.
	TasksPerFile int
	// Files stops the collector after this many files; 0: until ctx ends.
	Files int
	// MaxPending pauses collecting while incoming/ holds this many unclaimed files
	// (default 2), so rollouts stay close to the policy that trains on them.
	MaxPending int
	// RunID prefixes rollout ids and file names (default "collect-<unix seconds>").
	RunID string
	// Episode configures sampling and the episodes (Group default 8, temperature 1).
	Episode EpisodeOptions
	// Log receives lifecycle and per-file lines; Progress, if set, a progress line per
	// file for a person.
	Log      zerolog.Logger
	Progress io.Writer
}

// Totals is what a collector has done.
type Totals struct {
	Files, Rollouts, Tokens int
	Success                 float64 // mean success over every rollout written
	PolicyVersion           int64   // the step of the policy last sampled from
	Reloads                 int
}

// Run collects rollout files until ctx ends or opts.Files are written. A ctx that ends
// is a clean stop (nil error); the file in hand is not written.
func Run(ctx context.Context, opts Options) (Totals, error) {
	if opts.Split == "" {
		opts.Split = toolworld.SplitTrain
	}
	if opts.TasksPerFile <= 0 {
		opts.TasksPerFile = 2
	}
	if opts.MaxPending <= 0 {
		opts.MaxPending = 2
	}
	if opts.Episode.Group <= 0 {
		opts.Episode.Group = 8
	}
	if opts.RunID == "" {
		opts.RunID = "collect-" + strconv.FormatInt(time.Now().Unix(), 10)
	}
	if opts.Out == "" {
		return Totals{}, errors.New("collect: no output folder (the spool's incoming/)")
	}
	if err := os.MkdirAll(opts.Out, 0o755); err != nil {
		return Totals{}, fmt.Errorf("collect: %w", err)
	}
	log := opts.Log.With().Str("component", "collect").Logger()
	backend, err := xla.NewBackend(xla.ResolveBackend(opts.Backend, ""))
	if err != nil {
		return Totals{}, fmt.Errorf("collect: backend: %w", err)
	}
	p := &policy{backend: backend, modelDir: opts.ModelDir, root: opts.Checkpoints, log: log}
	var tot Totals
	var successSum float64
	next := opts.StartTask
	for file := 0; opts.Files == 0 || file < opts.Files; file++ {
		if err := waitForRoom(ctx, opts.Out, opts.MaxPending, func(n int) {
			log.Info().Int("pending", n).Msg("waiting for the daemon to claim rollout files")
			if opts.Progress != nil {
				fmt.Fprintf(opts.Progress, "  waiting for the daemon to claim: %d unclaimed files in %s (-max-pending %d)\n", n, opts.Out, opts.MaxPending)
			}
		}); err != nil {
			return tot, nil
		}
		reloaded, err := p.refresh()
		if err != nil {
			return tot, err
		}
		if reloaded {
			tot.Reloads++
			log.Info().Int64("policy_version", p.step).Str("model", p.dir).Msg("policy loaded")
		}
		tasks := make([]toolworld.Task, opts.TasksPerFile)
		for i := range tasks {
			if tasks[i], err = toolworld.Generate(opts.Split, next+i); err != nil {
				return tot, fmt.Errorf("collect: %w", err)
			}
		}
		eo := opts.Episode
		eo.Seed = opts.Episode.Seed ^ uint64(next)*0x9e3779b97f4a7c15
		t0 := time.Now()
		envs, err := Episodes(ctx, p.sampler, p.tok, tasks, eo)
		if err != nil {
			if ctx.Err() != nil {
				return tot, nil
			}
			return tot, fmt.Errorf("collect: %w", err)
		}
		rs := make([]*rollout.Rollout, len(envs))
		tokens := 0
		for i, e := range envs {
			task, g := next+i/eo.Group, i%eo.Group
			rs[i] = e.Rollout(fmt.Sprintf("%s-%s-%06d-%02d", opts.RunID, opts.Split, task, g))
			rs[i].PolicyVersion = p.step
			tokens += len(rs[i].Tokens)
		}
		name := fmt.Sprintf("%s-%06d.arrow", opts.RunID, next)
		if err := rollout.WriteFile(filepath.Join(opts.Out, name), rs, rollout.WriteOptions{}); err != nil {
			return tot, fmt.Errorf("collect: %w", err)
		}
		st := Summarize(envs)
		next += opts.TasksPerFile
		tot.Files++
		tot.Rollouts += len(rs)
		tot.Tokens += tokens
		tot.PolicyVersion = p.step
		successSum += st.Success * float64(len(rs))
		tot.Success = successSum / float64(tot.Rollouts)
		took := time.Since(t0)
		log.Info().Str("file", name).Int("rollouts", len(rs)).Int("tokens", tokens).Float64("success", st.Success).
			Int64("policy_version", p.step).Dur("took", took).Msg("rollout file written")
		if opts.Progress != nil {
			fmt.Fprintf(opts.Progress, "  %s  %d rollouts, %d tokens, success %3.0f%%, tool errors %3.0f%%, policy step %d, %.0f tokens/s\n",
				name, len(rs), tokens, 100*st.Success, 100*st.ToolError, p.step, float64(tokens)/took.Seconds())
		}
	}
	return tot, nil
}

// waitForRoom waits while dir holds max or more complete rollout files, calling
// waiting once when it starts to wait.
func waitForRoom(ctx context.Context, dir string, max int, waiting func(n int)) error {
	for said := false; ; said = true {
		n, err := pending(dir)
		if err != nil {
			return err
		}
		if n < max {
			return ctx.Err()
		}
		if !said {
			waiting(n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func pending(dir string) (int, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("collect: %w", err)
	}
	n := 0
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".arrow") {
			n++
		}
	}
	return n, nil
}

// policy is the sampler of the newest checkpoint (or the initial model).
type policy struct {
	backend  backends.Backend
	modelDir string
	root     string
	log      zerolog.Logger

	dir     string // what is loaded
	step    int64
	sampler *xla.Sampler
	tok     tokenizer.Tokenizer
}

// refresh loads the newest checkpoint if `latest` moved (or the initial model the
// first time) and reports whether it loaded anything.
func (p *policy) refresh() (bool, error) {
	dir, step := p.modelDir, int64(0)
	if p.root != "" {
		if target, err := os.Readlink(filepath.Join(p.root, checkpoint.LatestLinkName)); err == nil {
			ck := filepath.Join(p.root, target)
			if p.sampler != nil && ck == p.dir {
				return false, nil // latest has not moved: no need to hash its files again
			}
			if st, err := checkpoint.Verify(ck); err == nil {
				dir, step = ck, st.Step
			} else {
				p.log.Warn().Err(err).Str("checkpoint", ck).Msg("latest checkpoint does not verify; keeping the policy loaded")
				if p.sampler != nil {
					return false, nil
				}
			}
		}
	}
	if p.sampler != nil && dir == p.dir {
		return false, nil
	}
	if dir == "" {
		return false, errors.New("collect: no model directory and no checkpoint to sample from")
	}
	m, err := xla.Open(dir, xla.OpenOptions{})
	if err != nil {
		return false, fmt.Errorf("collect: open policy %s: %w", dir, err)
	}
	tok := m.Tokenizer()
	s, err := xla.NewSampler(p.backend, m, 0)
	if err != nil {
		return false, fmt.Errorf("collect: %w", err)
	}
	p.dir, p.step, p.sampler, p.tok = dir, step, s, tok
	return true, nil
}
