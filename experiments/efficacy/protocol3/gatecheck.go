package protocol3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hindsight-ai/hindsight/experiments/efficacy"

	"github.com/gomlx/gomlx/backends"

	"github.com/hindsight-ai/hindsight/data/safetensors"
	"github.com/hindsight-ai/hindsight/internal/fsutil"
	"github.com/hindsight-ai/hindsight/toolworld"
)

// Gate is one of protocol 3's gates: its name and its field in results.json.
type Gate struct{ Name, Key string }

// GateKeys are protocol 3's gates in order, each with the results.json field that
// holds its GateResult: G1–G3 as MeasureGates writes them, G4 as WritePilot adds it.
var GateKeys = []Gate{{"G1", "g1_live_hints"}, {"G2", "g2_probe"}, {"G3", "g3_warm_start"}, {"G4", "g4_outcome_pilot"}}

// GateSet is the gates a results.json records, by name (G1…G4); a gate not measured
// is absent.
type GateSet map[string]GateResult

// ReadGates reads the gates of results.json at path (GateKeys), and the pilot's
// record when there is one.
func ReadGates(path string) (GateSet, *PilotResult, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: no gates recorded, %s does not exist: measure G1–G3 first (-gates)", ErrGates, path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read gates: %w", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, nil, fmt.Errorf("read gates %s: %w", path, err)
	}
	g := GateSet{}
	for _, k := range GateKeys {
		v, ok := fields[k.Key]
		if !ok || string(v) == "null" {
			continue
		}
		var r GateResult
		if err := json.Unmarshal(v, &r); err != nil {
			return nil, nil, fmt.Errorf("read gates %s: field %s: %w", path, k.Key, err)
		}
		g[k.Name] = r
	}
	var pilot *PilotResult
	if v, ok := fields[pilotKey]; ok && string(v) != "null" {
		pilot = &PilotResult{}
		if err := json.Unmarshal(v, pilot); err != nil {
			return nil, nil, fmt.Errorf("read gates %s: field %s: %w", path, pilotKey, err)
		}
	}
	return g, pilot, nil
}

// ErrGates is wrapped by CheckGates's error: the arms must not run.
var ErrGates = errors.New("protocol 3's gates do not pass: the arms do not run")

// CheckGates returns nil when every gate of GateKeys passed, else an error (wrapping
// ErrGates) naming each gate that failed, with its measured numbers and threshold, or
// was not measured.
func CheckGates(g GateSet) error {
	var bad []string
	for _, k := range GateKeys {
		r, ok := g[k.Name]
		switch {
		case !ok && k.Name == "G4":
			bad = append(bad, fmt.Sprintf("%s (%s) not measured: run -pilot", k.Name, k.Key))
		case !ok:
			bad = append(bad, fmt.Sprintf("%s (%s) not measured: run -gates", k.Name, k.Key))
		case !r.Pass:
			bad = append(bad, fmt.Sprintf("%s (%s) failed: measured %s; threshold %s", k.Name, k.Key, measured(r.Measured), r.Threshold))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n  %s", ErrGates, strings.Join(bad, "\n  "))
}

func measured(m map[string]float64) string {
	b, _ := json.Marshal(efficacy.JSONSafe(m)) // keys sorted
	return string(b)
}

// pilotKey is the results.json field of the pilot's record.
const pilotKey = "g4_pilot"

// PilotResult is G4, the outcome-only pilot: outcome-only with seed 1 on the
// validation split, at each learning rate of a grid, with the arms' steps, tasks,
// group and eval cadence. The rate with the largest final gain (of equal gains, the
// earlier in the grid) is the arms' rate for every arm (fixed on the baseline, so any tuning bias favours it); G4 passes when
// that gain is at least PilotMinGain.
type PilotResult struct {
	// Model is the warm start's directory and ModelSHA256 its weights' digest: the
	// arms refuse a warm start other than the one the pilot ran on.
	Model       string          `json:"model"`
	ModelSHA256 string          `json:"model_sha256"`
	Config      efficacy.Config `json:"config"`
	LRs         []float64       `json:"lrs"`
	// Gains are the final validation gains (points as fractions), one per rate.
	Gains []float64      `json:"gains"`
	Runs  []efficacy.Run `json:"runs"`
	// LR is the rate chosen, Gain its gain.
	LR         float64 `json:"lr"`
	Gain       float64 `json:"gain"`
	Pass       bool    `json:"pass"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Command    string  `json:"command,omitempty"`
}

// PilotMinGain is G4's least gain of outcome-only on the validation split (5 points).
const PilotMinGain = 0.05

// Pilot runs G4 with cfg's arms settings (Config with Model set) at each
// rate of lrs.
func Pilot(ctx context.Context, backend backends.Backend, cfg efficacy.Config, lrs []float64, progress func(string)) (PilotResult, error) {
	c0 := efficacy.CPUTime()
	if len(lrs) == 0 {
		return PilotResult{}, errors.New("pilot: no learning rate")
	}
	sum, err := ModelDigest(cfg.Model)
	if err != nil {
		return PilotResult{}, err
	}
	pc := cfg
	if len(cfg.Seeds) == 0 {
		return PilotResult{}, errors.New("pilot: no seed")
	}
	seed := cfg.Seeds[0] // 1 as registered; another with -seed-list
	pc.Arms, pc.Seeds = []string{efficacy.ArmOutcome}, []int64{seed}
	pc.EvalSplit, pc.EvalTasks = toolworld.SplitValidation, toolworld.SplitSizes[toolworld.SplitValidation]
	pc.LR = lrs[0]
	if err := pc.Validate(); err != nil {
		return PilotResult{}, fmt.Errorf("pilot: %w", err)
	}
	res := PilotResult{Model: cfg.Model, ModelSHA256: sum, Config: pc, LRs: lrs, Gain: -1}
	r := &efficacy.Runner{Backend: backend, Config: pc, Progress: progress}
	defer r.Close()
	for _, lr := range lrs {
		if !(lr > 0) {
			return res, fmt.Errorf("pilot: learning rate %g, want > 0", lr)
		}
		r.Config.LR = lr
		run, err := r.Run(ctx, efficacy.ArmOutcome, seed)
		if err != nil {
			return res, fmt.Errorf("pilot: lr %g: %w", lr, err)
		}
		pts := run.Curve.Points
		g := pts[len(pts)-1].Success - pts[0].Success
		res.Runs, res.Gains = append(res.Runs, run), append(res.Gains, g)
		if g > res.Gain {
			res.LR, res.Gain = lr, g
		}
		progress(fmt.Sprintf("pilot: lr %g validation gain %+.1f points", lr, 100*g))
	}
	res.Pass = res.Gain >= PilotMinGain-1e-12
	res.CPUSeconds = (efficacy.CPUTime() - c0).Seconds()
	return res, nil
}

// Gate returns the pilot as G4's GateResult.
func (p PilotResult) Gate() GateResult {
	m := map[string]float64{"gain": p.Gain, "lr": p.LR}
	for i, lr := range p.LRs {
		m[fmt.Sprintf("gain_at_lr_%g", lr)] = p.Gains[i]
	}
	return GateResult{Pass: p.Pass, Measured: m,
		Threshold: fmt.Sprintf("outcome-only's final gain on the validation split (seed 1) at the best rate ≥ %.2f", PilotMinGain)}
}

// WritePilot adds the pilot to the results.json at path, which MeasureGates wrote
// (its other fields are kept as they are): G4's GateResult and the pilot's record.
func WritePilot(path string, p PilotResult) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("write pilot: %w (measure G1–G3 first: -gates)", err)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return fmt.Errorf("write pilot: %s: %w", path, err)
	}
	for key, v := range map[string]any{GateKeys[3].Key: p.Gate(), pilotKey: p} {
		b, err := json.Marshal(efficacy.JSONSafe(v))
		if err != nil {
			return fmt.Errorf("write pilot: %w", err)
		}
		fields[key] = b
	}
	out, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return fmt.Errorf("write pilot: %w", err)
	}
	return fsutil.WriteFileBytes(path, append(out, '\n'), 0o644)
}

// ModelDigest is the hex SHA-256 of model directory dir's weights file.
func ModelDigest(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, safetensors.FileName))
	if err != nil {
		return "", fmt.Errorf("model digest: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("model digest: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ArmsReady checks that protocol 3's arms may run on the warm start at model, from
// the results.json at gatesPath: every gate passed (CheckGates), and the pilot ran on
// this warm start. It returns the gates and the pilot's learning rate.
func ArmsReady(gatesPath, model string) (GateSet, float64, error) {
	g, pilot, err := ReadGates(gatesPath)
	if err != nil {
		return nil, 0, err
	}
	if err := CheckGates(g); err != nil {
		return g, 0, fmt.Errorf("%s: %w", gatesPath, err)
	}
	if pilot == nil || !(pilot.LR > 0) {
		return g, 0, fmt.Errorf("%s: %w: G4 passed but the pilot's record (%s) with its learning rate is missing: run -pilot", gatesPath, ErrGates, pilotKey)
	}
	sum, err := ModelDigest(model)
	if err != nil {
		return g, 0, err
	}
	if sum != pilot.ModelSHA256 {
		return g, 0, fmt.Errorf("%s: %w: the pilot ran on a warm start with weights %s, %s has %s: run -gates and -pilot again", gatesPath, ErrGates, short(pilot.ModelSHA256), model, short(sum))
	}
	return g, pilot.LR, nil
}

func short(digest string) string { return digest[:min(12, len(digest))] }

// RunArms runs protocol 3's arms (cfg: Config with Model set) into out,
// writing the results after every run, only when ArmsReady passes the gates recorded
// in the results.json at gatesPath: otherwise it returns the refusal (wrapping
// ErrGates) and writes nothing. The learning rate is the pilot's, whatever cfg says.
func RunArms(ctx context.Context, backend backends.Backend, cfg efficacy.Config, gatesPath, out, command string, progress func(string)) (Results, error) {
	gates, lr, err := ArmsReady(gatesPath, cfg.Model)
	if err != nil {
		return Results{}, err
	}
	cfg.LR = lr
	return runArms(ctx, backend, cfg, gates, false, out, command, progress)
}

// runArms is RunArms after the gate check; bypassed records that the check did not
// run (the package's smoke test, on a model no gate was measured on).
func runArms(ctx context.Context, backend backends.Backend, cfg efficacy.Config, gates GateSet, bypassed bool, out, command string, progress func(string)) (Results, error) {
	if err := cfg.Validate(); err != nil {
		return Results{}, fmt.Errorf("arms: %w", err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return Results{}, fmt.Errorf("arms: %w", err)
	}
	r := &efficacy.Runner{Backend: backend, Config: cfg, Progress: progress}
	defer r.Close()
	res, err := Experiment(ctx, r, gates, func(res Results) error {
		res.Command, res.GatesBypassed = command, bypassed
		return res.Write(out)
	})
	res.Command, res.GatesBypassed = command, bypassed
	return res, err
}
