package xla

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	mlctx "github.com/gomlx/gomlx/pkg/ml/context"
)

// Devices is how many of a backend's devices a trainer uses (train.devices): a
// count ≥ 1, or 0 for every device the backend has (`all`). It decodes from YAML
// as a number or the word all.
type Devices int

// DevicesAll is Devices' value for every device of the backend.
const DevicesAll Devices = 0

// UnmarshalText reads a count or `all`.
func (d *Devices) UnmarshalText(b []byte) error {
	s := strings.TrimSpace(string(b))
	if s == "all" {
		*d = DevicesAll
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q: want a device count ≥ 1 or all", s)
	}
	*d = Devices(n)
	return nil
}

// MarshalText writes the count or `all`.
func (d Devices) MarshalText() ([]byte, error) {
	if d == DevicesAll {
		return []byte("all"), nil
	}
	return []byte(strconv.Itoa(int(d))), nil
}

// String is the count or `all`.
func (d Devices) String() string { b, _ := d.MarshalText(); return string(b) }

// Resolve returns the number of devices d stands for on backend: every device
// for all, else d, with an error naming both counts when the backend has fewer.
func (d Devices) Resolve(backend backends.Backend) (int, error) {
	have := backend.NumDevices()
	if d == DevicesAll {
		return have, nil
	}
	if d < 0 {
		return 0, fmt.Errorf("devices: %d, want ≥ 1 or all", int(d))
	}
	if int(d) > have {
		name, device := BackendInfo(backend)
		hint := ""
		if name == "xla" {
			hint = fmt.Sprintf(" (for the XLA CPU plugin, ask for more with backend %s,devices=%d)", CPUPluginName, int(d))
		}
		return 0, fmt.Errorf("devices: %d, but backend %s has %d (%s)%s", int(d), name, have, device, hint)
	}
	return int(d), nil
}

// cpuDevicesOption is the `xla-cpu` spec option that sets the XLA CPU plugin's device
// count (`xla-cpu,devices=2`): PJRT's `cpu_device_count` client option.
const cpuDevicesOption = "devices="

// cutDevicesOption removes a `devices=N` option from an `xla:` spec's options and
// returns the PJRT client options it stands for (nil when there is none).
func cutDevicesOption(spec string) (string, map[string]any, error) {
	name, rest, ok := strings.Cut(spec, ",")
	if !ok {
		return spec, nil, nil
	}
	var keep []string
	var opts map[string]any
	for _, o := range strings.Split(rest, ",") {
		v, found := strings.CutPrefix(o, cpuDevicesOption)
		if !found {
			keep = append(keep, o)
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return "", nil, fmt.Errorf("backend %s: option %s: want devices=N with N ≥ 1", spec, o)
		}
		opts = map[string]any{"cpu_device_count": int64(n)}
	}
	if len(keep) == 0 {
		return name, opts, nil
	}
	return name + "," + strings.Join(keep, ","), opts, nil
}

// modelExec runs a graph function over a model's variables, like GoMLX's
// context.Exec, on any of the backend's devices: the program is compiled once
// (portable) and ExecOn runs it on the device asked for, with the arguments and the
// model's weights placed there.
//
// context.Exec cannot do this in GoMLX v0.26.0 (dataparallel_test.go reproduces
// each failure): a single-device Exec given a device assignment is refused
// ("cannot set device assignment on a graph that doesn't have a distribution
// strategy"), its arguments always go to device 0 (graph.Exec's
// convertArgsToBuffers uses the default device, 0 for Exec), and under SPMD every
// variable becomes a sharded parameter that the XLA builder rejects ("mesh \"mesh\"
// not found": it records meshes for AutoSharding only). So modelExec drives a
// plain graph.Exec and sets the variables' parameters itself, from the weights'
// copy on the device that runs (Model.onDevice).
type modelExec struct {
	model *Model
	exec  *graph.Exec
	ctx   *mlctx.Context
}

// newModelExec is a modelExec of fn over m's variables, keeping every shape it
// compiles.
func newModelExec(backend backends.Backend, m *Model, fn func(*mlctx.Context, []*graph.Node) []*graph.Node) (*modelExec, error) {
	e := &modelExec{model: m, ctx: m.ctx}
	var err error
	e.exec, err = graph.NewExec(backend, func(in []*graph.Node) []*graph.Node {
		out := fn(e.ctx, in)
		if !e.ctx.IsReuse() {
			e.ctx = e.ctx.Reuse()
		}
		return out
	})
	if err != nil {
		return nil, err
	}
	e.exec.SetMaxCache(-1)
	e.exec.SetSideParamsHook(e.setVariables)
	return e, nil
}

// Exec runs on device 0.
func (e *modelExec) Exec(args ...any) ([]*tensors.Tensor, error) { return e.ExecOn(0, args...) }

// ExecOn runs on device d: arguments that are Go values go there, tensors must be
// there already, and the outputs stay there.
func (e *modelExec) ExecOn(d backends.DeviceNum, args ...any) ([]*tensors.Tensor, error) {
	out, _, err := e.exec.ExecWithGraphOnDevice(d, args...)
	return out, err
}

// PreCompile compiles the program for args (as placed on device 0: GoMLX v0.26.0
// places a precompile's arguments on device 0 only).
func (e *modelExec) PreCompile(args ...any) error { return e.exec.PreCompile(args...) }

// SetMaxCache is graph.Exec's.
func (e *modelExec) SetMaxCache(n int) *modelExec { e.exec.SetMaxCache(n); return e }

// setVariables is the graph.Exec side-parameter hook: it fills the parameters the
// model's variables became with their values on the device of the first argument
// (every argument of one call is on the same device).
func (e *modelExec) setVariables(g *graph.Graph, in []backends.Buffer, donate []bool) error {
	var dev backends.DeviceNum
	if len(in) > 0 && in[0] != nil {
		d, err := g.Backend().BufferDeviceNum(in[0])
		if err != nil {
			return fmt.Errorf("device of argument 0: %w", err)
		}
		dev = d
	}
	for v := range e.model.ctx.IterVariables() {
		if !v.InUseByGraph(g) {
			continue
		}
		if v.ChangedInGraph(g) {
			return fmt.Errorf("variable %s: changed in a graph, which modelExec does not write back", v.ScopeAndName())
		}
		p := g.GetParameterByName(v.ParameterName())
		if p == nil {
			return fmt.Errorf("variable %s: no parameter %s in graph %s", v.ScopeAndName(), v.ParameterName(), g.Name())
		}
		buf, err := e.model.onDevice(g.Backend(), v, dev)
		if err != nil {
			return err
		}
		h := p.GetParameterHandle()
		in[h], donate[h] = buf, false
	}
	return nil
}

// replicas are a model's weights copied to devices other than 0, made on first use
// and again whenever a variable's value changes (after an optimizer step): the
// weights stay identical on every device, device 0's copy the one that is trained
// and saved.
type replicas struct {
	mu sync.Mutex
	// by variable, then device: the copy and the device-0 tensor it was made from.
	copies map[*mlctx.Variable]map[backends.DeviceNum]replica
}

type replica struct {
	from, copy *tensors.Tensor
}

// onDevice returns v's value as a buffer on device d: the variable's own tensor on
// device 0, a copy (device to device) elsewhere.
func (m *Model) onDevice(backend backends.Backend, v *mlctx.Variable, d backends.DeviceNum) (backends.Buffer, error) {
	value, err := v.Value()
	if err != nil {
		return nil, fmt.Errorf("variable %s: %w", v.ScopeAndName(), err)
	}
	if d == 0 {
		return value.Buffer(backend, 0)
	}
	m.replicas.mu.Lock()
	defer m.replicas.mu.Unlock()
	if m.replicas.copies == nil {
		m.replicas.copies = map[*mlctx.Variable]map[backends.DeviceNum]replica{}
	}
	byDev := m.replicas.copies[v]
	if byDev == nil {
		byDev = map[backends.DeviceNum]replica{}
		m.replicas.copies[v] = byDev
	}
	if r, ok := byDev[d]; ok && r.from == value && r.copy.Ok() {
		return r.copy.Buffer(backend, d)
	} else if ok {
		r.copy.FinalizeAll()
	}
	src, err := value.Buffer(backend, 0)
	if err != nil {
		return nil, fmt.Errorf("variable %s on device 0: %w", v.ScopeAndName(), err)
	}
	buf, err := backend.BufferCopyToDevice(src, d)
	if err != nil {
		return nil, fmt.Errorf("copy variable %s to device %d: %w", v.ScopeAndName(), d, err)
	}
	t, err := tensors.FromBuffer(backend, buf)
	if err != nil {
		return nil, err
	}
	byDev[d] = replica{from: value, copy: t}
	return buf, nil
}

// dropReplicas frees the model's copies on devices other than 0.
func (m *Model) dropReplicas() {
	m.replicas.mu.Lock()
	defer m.replicas.mu.Unlock()
	for _, byDev := range m.replicas.copies {
		for _, r := range byDev {
			r.copy.FinalizeAll()
		}
	}
	m.replicas.copies = nil
}

// deviceOf is the device t's buffer is on (0 for a tensor only on the host).
func deviceOf(t *tensors.Tensor) backends.DeviceNum {
	if d, err := t.Device(); err == nil {
		return d
	}
	return 0
}
