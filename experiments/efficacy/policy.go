package efficacy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/collect"
	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/xla"
)

// Policy is a model opened for the experiment: its weights (shared by the sampler and
// the trainer that updates them in place), sampler and tokenizer.
type Policy struct {
	Dir     string
	Model   *xla.Model
	Sampler *xla.Sampler
	Tok     tokenizer.Tokenizer
}

// OpenPolicy loads model directory dir on backend.
func OpenPolicy(backend backends.Backend, dir string) (*Policy, error) {
	md, err := data.OpenModelDir(dir)
	if err != nil {
		return nil, fmt.Errorf("open policy: %w", err)
	}
	tok := md.Tokenizer
	md.Close()
	m, err := xla.Open(dir, xla.OpenOptions{Tokenizer: tok})
	if err != nil {
		return nil, fmt.Errorf("open policy: %w", err)
	}
	s, err := xla.NewSampler(backend, m, 0)
	if err != nil {
		return nil, fmt.Errorf("open policy: %w", err)
	}
	return &Policy{Dir: dir, Model: m, Sampler: s, Tok: tok}, nil
}

// World sizes the task world: every episode of the experiment (training and eval)
// uses it.
type World struct {
	MaxTokens     int `json:"max_tokens"`      // per rollout
	MaxTurnTokens int `json:"max_turn_tokens"` // per policy turn
	MaxCalls      int `json:"max_calls"`
}

// DefaultWorld is 256 tokens a rollout, 40 a turn, 6 calls.
func DefaultWorld() World { return World{MaxTokens: 256, MaxTurnTokens: 40, MaxCalls: 6} }

// Episodes are collect's options for group episodes of each task in the world,
// sampled at temperature temp from seed.
func (w World) Episodes(group int, temp float64, seed uint64) collect.EpisodeOptions {
	return collect.EpisodeOptions{Group: group, Batch: 64, MaxTurnTokens: w.MaxTurnTokens, Temperature: temp, Seed: seed,
		Env: toolworld.Options{MaxTokens: w.MaxTokens, MaxCalls: w.MaxCalls}}
}

// Evaluate plays one greedy episode of each task and returns the success rate and
// the episodes' summary.
func Evaluate(ctx context.Context, p *Policy, tasks []toolworld.Task, w World) (collect.Stats, error) {
	st, _, err := EvaluateFamilies(ctx, p, tasks, w)
	return st, err
}

// EvaluateFamilies is Evaluate with each task family's success rate beside the
// summary (ByFamily), from the same greedy episodes.
func EvaluateFamilies(ctx context.Context, p *Policy, tasks []toolworld.Task, w World) (collect.Stats, map[string]float64, error) {
	envs, err := collect.Episodes(ctx, p.Sampler, p.Tok, tasks, w.Episodes(1, 0, 0))
	if err != nil {
		return collect.Stats{}, nil, fmt.Errorf("evaluate: %w", err)
	}
	return collect.Summarize(envs), ByFamily(envs), nil
}

// CPUTime returns the CPU time (user + system) the process has used so far: robust to
// other processes on a shared machine, unlike wall time.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SaveModel writes the trainer's weights as a Hugging Face model directory dir (f32
// safetensors, config and tokenizer files of the model directory from), through a
// temporary directory renamed into place.
func SaveModel(tr *xla.Trainer, from, dir string) error {
	files, err := checkpoint.ModelFiles(from)
	if err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	ck, err := tr.Checkpoint(files, checkpoint.TrainerState{})
	if err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	err = ReplaceDir(dir, func(tmp string) error {
		for name, b := range files {
			if err := fsutil.WriteFileBytes(filepath.Join(tmp, name), b, 0o644); err != nil {
				return err
			}
		}
		return safetensors.Write(filepath.Join(tmp, safetensors.FileName), ck.Tensors[safetensors.FileName], nil)
	})
	if err != nil {
		return fmt.Errorf("save model: %w", err)
	}
	return nil
}

// ReplaceDir makes dir anew: fill writes its files into a temporary directory beside
// it (dir.tmp, emptied first), which then replaces dir by a rename, the parent
// directory synced.
func ReplaceDir(dir string, fill func(tmp string) error) error {
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(dir))
}
