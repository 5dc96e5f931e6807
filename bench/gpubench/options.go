package gpubench

import (
	"fmt"
	"slices"
	"time"

	"github.com/hindsight-ai/hindsight/xla"
)

// Options say what Run measures and where it writes.
type Options struct {
	Out       string // directory for results.json and bench.log (created)
	ModelDir  string // where the random-weight models are written (default Out/models)
	Backend   string // GoMLX backend spec (xla.ResolveBackend)
	CPU       bool   // rehearsal: tiny sizes, PyTorch on the CPU
	Python    string // python3 with torch for the peer ("" skips the PyTorch stages, recorded)
	Peer      string // bench/gpu/torch_peer.py
	Device    string // PyTorch device: "cuda" or "cpu"
	Stages    []string
	Budgets   map[string]time.Duration // per stage
	PeakN     int                      // matmul size of the peak stage
	Parity    []string                 // presets
	ParityT   int
	Speed     []string // presets
	SpeedT    []int
	PeerTypes []string // PyTorch dtypes of the speed peers
	// Precisions are hindsight's model.precision values the parity and speed stages
	// run (f32, bf16); each speed peer dtype is compared with the matching one.
	Precisions []string
	GenPreset  string
	GenBatch   []int
	GenNew     int
	Long       string // preset
	LongT      int
	LongChunk  []int
	Reps       int
	// ProfilePreset and ProfileT are the profile stage's model and rollout length;
	// Pprof writes its CPU and heap profiles.
	ProfilePreset string
	ProfileT      int
	Pprof         bool
	// ProfileTrainT is the length of the profile stage's training step whose memory
	// it breaks down (0: none); ProfileLayers replaces the preset's layer count for
	// it (0: the preset's); ProfileBefore also runs the step with the update of
	// before issue 42 (xla.TrainerOptions.WholeUpdate), in the same process.
	ProfileTrainT int
	ProfileLayers int
	ProfileBefore bool
	// ProfileLayerPrograms runs the profile stage's training step with
	// xla.ScorerOptions.LayerPrograms (one decoder layer's program run per layer,
	// docs/performance.md "Layer programs").
	ProfileLayerPrograms bool
	// ProfileNoPrepare leaves the profile stage's trainer unprepared (no
	// xla.Trainer.Prepare before its first step), as before issue 42's restart
	// work: the first step then places the weights and makes the moments itself.
	ProfileNoPrepare bool
	// ProfileTrainPrecisions are the precisions of that step (each one of
	// Precisions the backend runs).
	ProfileTrainPrecisions []string
	// DataParallel and DataParallelT are the data-parallel stage's model and rollout
	// length (2 rollouts a device).
	DataParallel  string
	DataParallelT int
}

// AllStages in the order they run.
var AllStages = []string{"peak", "parity", "profile", "speed", "generate", "long", "dataparallel", "memory"}

// Defaults returns the GPU run's sizes (≈9.7 minutes by the budgets, less on one H200,
// where the data-parallel stage ends at once) or,
// with cpu, the rehearsal's tiny sizes.
func Defaults(cpu bool) Options {
	if cpu {
		return Options{CPU: true, Device: "cpu", Stages: AllStages, PeakN: 256,
			Budgets: map[string]time.Duration{"peak": 30 * time.Second, "parity": 60 * time.Second, "profile": 60 * time.Second, "speed": 150 * time.Second,
				"generate": 30 * time.Second, "long": 90 * time.Second, "dataparallel": 60 * time.Second, "memory": 10 * time.Second},
			Parity: []string{"qwen3-tiny"}, ParityT: 64, Speed: []string{"qwen3-tiny"}, SpeedT: []int{128},
			PeerTypes: []string{"float32", "bfloat16"}, Precisions: []string{"f32", "bf16"}, GenPreset: "qwen3-tiny", GenBatch: []int{1, 4}, GenNew: 16,
			Long: "qwen3-tiny", LongT: 512, LongChunk: []int{64, 128}, Reps: 1,
			ProfilePreset: "qwen3-tiny", ProfileT: 300, ProfileTrainT: 64, ProfileTrainPrecisions: []string{"f32", "bf16"}, DataParallel: "qwen3-tiny", DataParallelT: 128}
	}
	return Options{Device: "cuda", Stages: AllStages, PeakN: 8192,
		Budgets: map[string]time.Duration{"peak": 20 * time.Second, "parity": 60 * time.Second, "profile": 70 * time.Second, "speed": 210 * time.Second,
			"generate": 30 * time.Second, "long": 90 * time.Second, "dataparallel": 90 * time.Second, "memory": 10 * time.Second},
		Parity: []string{"qwen3-tiny", "qwen3-0.6b"}, ParityT: 1024, Speed: []string{"qwen3-0.6b", "qwen3-1.7b"},
		SpeedT: []int{8192, 32768}, PeerTypes: []string{"float32", "bfloat16"}, Precisions: []string{"f32", "bf16"}, GenPreset: "qwen3-0.6b", GenBatch: []int{1, 8},
		GenNew: 128, Long: "qwen3-0.6b", LongT: 131072, LongChunk: []int{256, 1024}, Reps: 1,
		ProfilePreset: "qwen3-0.6b", ProfileT: 3233, ProfileTrainT: 256, ProfileTrainPrecisions: []string{"f32"}, DataParallel: "qwen3-0.6b", DataParallelT: 4096}
}

// Validate names the first bad option.
func (o Options) Validate() error {
	if o.Out == "" {
		return fmt.Errorf("options: out: empty")
	}
	for _, s := range o.Stages {
		if !slices.Contains(AllStages, s) {
			return fmt.Errorf("options: stage %q: want one of %v", s, AllStages)
		}
		if o.Budgets[s] <= 0 {
			return fmt.Errorf("options: stage %q: no time budget", s)
		}
	}
	for _, p := range o.Precisions {
		if err := xla.Precision(p).Validate(); err != nil {
			return fmt.Errorf("options: precision: %w", err)
		}
	}
	if o.ParityT < 16 || o.LongT < 16 || o.ProfileT < 16 || o.Reps < 1 || (slices.Contains(o.Stages, "dataparallel") && o.DataParallelT < 16) {
		return fmt.Errorf("options: parity T %d, long T %d, profile T %d, data-parallel T %d, reps %d: want T ≥ 16, reps ≥ 1",
			o.ParityT, o.LongT, o.ProfileT, o.DataParallelT, o.Reps)
	}
	return nil
}
