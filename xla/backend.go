package xla

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	xlapjrt "github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	gomlxxla "github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
)

// DefaultBackend is the backend used when neither flag, config nor $GOMLX_BACKEND names
// one: GoMLX's pure-Go backend with unlimited parallelism. It needs no download.
const DefaultBackend = "go:parallelism=-1"

// CPUPluginName is the short backend name for the fetched XLA CPU plugin; it resolves
// to `xla:<cache>/xla-cpu/pjrt_c_api_cpu_plugin.so,shared_buffers`. Plugin options may
// follow it after a comma, as for `xla:`; `noshared_buffers` turns off the zero-copy
// buffers GoMLX itself enables for a CPU plugin it finds by name.
const CPUPluginName = "xla-cpu"

// CPUPluginEnv names the environment variable that points `xla-cpu` at a plugin file
// other than the cached one.
const CPUPluginEnv = "HINDSIGHT_XLA_CPU_PLUGIN"

// minPJRTMinor is the oldest PJRT C API minor version go-xla v0.1.4 (GoMLX v0.26.0) can
// call: it is built against the 0.83 header, and an older plugin's function table is
// shorter than the one go-xla indexes into. Newer 0.x plugins accept older clients.
const minPJRTMinor = 83

// ResolveBackend returns the backend spec to use: the flag if set, else the config's
// `backend:`, else $GOMLX_BACKEND, else DefaultBackend. `auto` picks one (AutoBackend,
// ChooseBackend). The short name `xla-cpu`
// becomes `xla:<absolute path of the cached CPU plugin>,shared_buffers`
// ($HINDSIGHT_XLA_CPU_PLUGIN overrides the path); if no cache directory can be found it stays `xla-cpu` and
// NewBackend reports why.
func ResolveBackend(flag, config string) string {
	return ChooseBackend(flag, config, DefaultBackend).Spec
}

// cutCPUPlugin splits `xla-cpu[,opts]` into the name and the options (with their
// leading comma), adding shared_buffers unless the options already say; ok is false
// for any other spec.
func cutCPUPlugin(spec string) (name, opts string, ok bool) {
	name, rest, _ := strings.Cut(spec, ",")
	if name != CPUPluginName {
		return "", "", false
	}
	list := strings.FieldsFunc(rest, func(r rune) bool { return r == ',' })
	if !slices.Contains(list, "shared_buffers") && !slices.Contains(list, "noshared_buffers") {
		list = append(list, "shared_buffers")
	}
	return name, "," + strings.Join(list, ","), true
}

// CPUPluginPath returns the absolute path `xla-cpu` stands for: $HINDSIGHT_XLA_CPU_PLUGIN
// if set, else the plugin's place in the cache (~/.cache/hindsight/pjrt/xla-cpu/…),
// whether or not it has been fetched.
func CPUPluginPath() (string, error) {
	if p := os.Getenv(CPUPluginEnv); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", fmt.Errorf("$%s=%s: %w", CPUPluginEnv, p, err)
		}
		return abs, nil
	}
	return pjrt.CPU.CachedPath()
}

// NewBackend creates the GoMLX backend spec names (`go[:opts]`, `xla:<absolute plugin
// path>[,opts]`, `xla-cpu[,opts]` or `auto`; the option `devices=N` sets the XLA CPU plugin's
// device count, PJRT's cpu_device_count, 4 by default) and runs a tiny graph on it, so a backend that is
// returned works. Every failure — unknown backend, missing plugin, a file that is not
// a shared library, a plugin speaking an incompatible PJRT C API, a load error, a panic
// inside GoMLX — comes back as one error that names the plugin path and says what to
// do. GoMLX's auto-install is always turned off first: nothing is ever downloaded.
func NewBackend(spec string) (b backends.Backend, err error) { return NewBackendWithOptions(spec, nil) }

// NewBackendWithOptions is NewBackend with PJRT client create options for an
// `xla:` plugin (e.g. {"preallocate": false} for the CUDA plugin, which otherwise
// takes 75% of device memory at start); nil for none. They are refused for the
// pure-Go backend.
func NewBackendWithOptions(spec string, clientOptions map[string]any) (b backends.Backend, err error) {
	os.Setenv(gomlxxla.NoAutoInstallEnv, "1") // GoMLX reads it at init; also for child processes
	gomlxxla.EnableAutoInstall(false)
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("backend %s: GoMLX panicked: %v", spec, r)
		}
	}()

	spec = strings.TrimSpace(spec)
	if spec == AutoBackend {
		spec = chooseAuto().Spec
	}
	if name, opts, ok := cutCPUPlugin(spec); ok {
		path, err := CPUPluginPath()
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", name, err)
		}
		spec = "xla:" + path + opts
	}
	spec, devices, err := cutDevicesOption(spec)
	if err != nil {
		return nil, err
	}
	if devices != nil {
		clientOptions = maps.Clone(clientOptions)
		if clientOptions == nil {
			clientOptions = map[string]any{}
		}
		maps.Copy(clientOptions, devices)
	}
	name, config, _ := strings.Cut(spec, ":")
	switch name {
	case simplego.BackendName:
		spec = unboundedGo(spec, config)
	case gomlxxla.BackendName:
		if err := checkPlugin(config); err != nil {
			return nil, err
		}
		path, _, _ := strings.Cut(config, ",")
		if err := setCPUFlags(path); err != nil {
			return nil, err
		}
	case "":
		return nil, fmt.Errorf("backend: empty spec: use %q, \"xla:<absolute plugin path>\", %q or %q", DefaultBackend, CPUPluginName, AutoBackend)
	default:
		return nil, fmt.Errorf("backend %s: unknown backend %q: use %q, \"xla:<absolute plugin path>\", %q or %q", spec, name, DefaultBackend, CPUPluginName, AutoBackend)
	}

	if clientOptions != nil && name != gomlxxla.BackendName {
		return nil, fmt.Errorf("backend %s: PJRT client options %v need an xla plugin", spec, clientOptions)
	}
	if clientOptions != nil {
		b, err = gomlxxla.NewWithOptions(config, clientOptions)
	} else {
		b, err = newQuietly(name, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("backend %s: %s", spec, oneLine(err))
	}
	if xb, ok := b.(*gomlxxla.Backend); ok {
		path, _, _ := strings.Cut(config, ",")
		if err := hookCompiles(xb, path); err != nil {
			b.Finalize()
			return nil, fmt.Errorf("backend %s: %w", spec, err)
		}
	}
	if err := smokeTest(b); err != nil {
		b.Finalize()
		return nil, fmt.Errorf("backend %s: run a test graph: %s", spec, oneLine(err))
	}
	return b, nil
}

// checkPlugin checks config (`<absolute path>[,opts]`) names a loadable PJRT plugin,
// then loads it and checks its PJRT C API version, all before GoMLX creates a client:
// dlopen on a bad file gives a cryptic error, and calling into a plugin with an older
// API than go-xla's reads past its function table.
func checkPlugin(config string) error {
	path, _, _ := strings.Cut(config, ",")
	fetch := fmt.Sprintf("fetch the CPU plugin with `hindsight fetch-xla-cpu` and use backend %s, or use backend %s (pure Go)", CPUPluginName, DefaultBackend)
	if path == "" {
		return fmt.Errorf("backend xla: no plugin path: give xla:<absolute path to the PJRT plugin .so>; %s", fetch)
	}
	if !filepath.IsAbs(path) {
		return fmt.Errorf("backend xla: plugin path %s is not absolute: give xla:<absolute path to the PJRT plugin .so> (GoMLX's plugin search and downloads are off); %s", path, fetch)
	}
	fail := func(format string, args ...any) error {
		return fmt.Errorf("XLA plugin %s: %s; %s", path, fmt.Sprintf(format, args...), fetch)
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("XLA plugin %s: %w; %s", path, fs.ErrNotExist, fetch)
	case err != nil:
		return fail("%v", err)
	case !info.Mode().IsRegular():
		return fail("not a regular file (%s)", info.Mode().Type())
	}
	raw, err := os.Open(path)
	if err != nil {
		return fail("%v", err)
	}
	defer raw.Close()
	magic := make([]byte, len(elf.ELFMAG))
	if _, err := io.ReadFull(raw, magic); err != nil || string(magic) != elf.ELFMAG {
		return fail("not a shared library (not an ELF file)")
	}
	f, err := elf.NewFile(raw)
	if err != nil {
		return fail("not a shared library: %v", err)
	}
	if f.Type != elf.ET_DYN {
		return fail("not a shared library: ELF type %s", f.Type)
	}
	if want := hostMachine(); want != elf.EM_NONE && f.Machine != want {
		return fail("built for %s, this machine is %s", f.Machine, want)
	}
	syms, err := f.DynamicSymbols()
	if err != nil {
		return fail("read dynamic symbols: %v", err)
	}
	if !hasSymbol(syms, xlapjrt.GetPJRTApiFunctionName) {
		return fail("not a PJRT plugin: no %s symbol", xlapjrt.GetPJRTApiFunctionName)
	}

	plugin, err := loadPlugin(path)
	if err != nil {
		return fail("load: %s", oneLine(err))
	}
	major, minor := plugin.Version()
	if major != 0 || minor < minPJRTMinor {
		return fail("speaks PJRT C API %d.%d, GoMLX's go-xla needs 0.%d or newer 0.x", major, minor, minPJRTMinor)
	}
	return nil
}

// loadPlugin dlopens the plugin through go-xla, which caches it by path, so GoMLX reuses
// this load. A panic in go-xla becomes an error.
func loadPlugin(path string) (p *xlapjrt.Plugin, err error) {
	defer func() {
		if r := recover(); r != nil {
			p, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	return xlapjrt.GetPlugin(path)
}

func hasSymbol(syms []elf.Symbol, name string) bool {
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Section != elf.SHN_UNDEF {
			return true
		}
	}
	return false
}

func hostMachine() elf.Machine {
	switch runtime.GOARCH {
	case "amd64":
		return elf.EM_X86_64
	case "arm64":
		return elf.EM_AARCH64
	}
	return elf.EM_NONE
}

// oneLine flattens an error from GoMLX or go-xla (which may carry a stack trace under
// %+v and newlines in dlerror text) into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// smokeTest runs 2·x+1 on a [3] float32 and checks the answer.
func smokeTest(b backends.Backend) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	out, err := graph.ExecOnce(b, func(x *graph.Node) *graph.Node {
		return graph.AddScalar(graph.MulScalar(x, 2), 1)
	}, []float32{0, 1, 2})
	if err != nil {
		return err
	}
	defer out.FinalizeAll()
	got, ok := out.Value().([]float32)
	if !ok || len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 5 {
		return fmt.Errorf("2·x+1 of [0 1 2] gave %v, want [1 3 5]", out.Value())
	}
	return nil
}

// BackendInfo describes b for status output: name is "go" or "xla", device says what
// runs the graphs, e.g. "cpu: pure Go, 2 cores" or
// "cpu:0 of 4, PJRT 0.115 plugin /root/.cache/hindsight/pjrt/xla-cpu/pjrt_c_api_cpu_plugin.so".
func BackendInfo(b backends.Backend) (name, device string) {
	switch b := b.(type) {
	case nil:
		return "", ""
	case *simplego.Backend:
		return simplego.BackendName, fmt.Sprintf("cpu: pure Go, %d cores", runtime.NumCPU())
	case *gomlxxla.Backend:
		if b.IsFinalized() {
			return gomlxxla.BackendName, "finalized"
		}
		device = fmt.Sprintf("%s of %d", strings.TrimSuffix(b.DeviceDescription(0), " [processId=0]"), b.NumDevices())
		// Description is "xla:<plugin path> - <plugin> [n device(s)]"; the plugin is
		// cached by path, so looking it up again loads nothing.
		path, _, _ := strings.Cut(strings.TrimPrefix(b.Description(), gomlxxla.BackendName+":"), " - ")
		if p, err := xlapjrt.GetPlugin(path); err == nil && filepath.IsAbs(path) {
			major, minor := p.Version()
			return gomlxxla.BackendName, fmt.Sprintf("%s, PJRT %d.%d plugin %s", device, major, minor, path)
		}
		return gomlxxla.BackendName, device + ", " + b.Description()
	default:
		return b.String(), b.Description()
	}
}

// newQuietly creates the backend. GoMLX v0.26.0's pure-Go backend prints
// "SimpleGo backend: parallelism set to N" on standard output when given a
// parallelism option, which would corrupt the output of commands that print JSON, so
// standard output is pointed at /dev/null while it is created.
func newQuietly(name, spec string) (backends.Backend, error) {
	if name != simplego.BackendName {
		return backends.NewWithConfig(spec)
	}
	quietMu.Lock()
	defer quietMu.Unlock()
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return backends.NewWithConfig(spec)
	}
	defer null.Close()
	stdout := os.Stdout
	os.Stdout = null
	defer func() { os.Stdout = stdout }()
	return backends.NewWithConfig(spec)
}

var quietMu sync.Mutex

// unboundedGo gives a pure-Go spec without a parallelism option GoMLX's unlimited
// parallelism, as DefaultBackend has. GoMLX v0.26.0's bounded worker pool (its default,
// 2 × the CPU count) deadlocks when every slot holds a DotGeneral node waiting for a slot
// of its own: the daemon's step hung with no CPU use on a 2-core machine
// (cmd/hindsightd TestTemperatureCreditFiles, backend: go). An explicit parallelism
// option is passed as written.
func unboundedGo(spec, config string) string {
	for _, opt := range strings.Split(config, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(opt), "="); k == "parallelism" {
			return spec
		}
	}
	if strings.TrimSpace(config) == "" {
		return simplego.BackendName + ":parallelism=-1"
	}
	return spec + ",parallelism=-1"
}
