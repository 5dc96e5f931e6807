package xla

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
	"github.com/hindsight-ai/hindsight/internal/pjrt/pjrttest"
	"github.com/hindsight-ai/hindsight/internal/testwait"
)

func TestResolveBackend(t *testing.T) {
	cache := t.TempDir()
	cached := filepath.Join(cache, "xla-cpu", "pjrt_c_api_cpu_plugin.so")
	for _, tc := range []struct {
		name, flag, config, env, pluginEnv, want string
	}{
		{name: "default", want: DefaultBackend},
		{name: "env", env: "go", want: "go"},
		{name: "config over env", config: "go:parallelism=2", env: "go", want: "go:parallelism=2"},
		{name: "flag over config", flag: "xla:/p/x.so", config: "go", env: "go:parallelism=1", want: "xla:/p/x.so"},
		{name: "blank flag falls through", flag: "  ", config: "go", want: "go"},
		{name: "short name", flag: "xla-cpu", want: "xla:" + cached + ",shared_buffers"},
		{name: "short name with options", config: "xla-cpu,tf32", want: "xla:" + cached + ",tf32,shared_buffers"},
		{name: "short name without shared buffers", config: "xla-cpu,noshared_buffers", want: "xla:" + cached + ",noshared_buffers"},
		{name: "short name from env", env: "xla-cpu", want: "xla:" + cached + ",shared_buffers"},
		{name: "plugin override", flag: "xla-cpu", pluginEnv: "/opt/pjrt/cpu.so", want: "xla:/opt/pjrt/cpu.so,shared_buffers"},
		{name: "other names untouched", flag: "xla-cpux", want: "xla-cpux"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(pjrt.CacheEnv, cache)
			t.Setenv(backends.ConfigEnvVar, tc.env)
			t.Setenv(CPUPluginEnv, tc.pluginEnv)
			require.Equal(t, tc.want, ResolveBackend(tc.flag, tc.config))
		})
	}
}

// tinyGraph is the graph both backends must agree on: softmax(x·w) over the last axis.
//
//	x: [2, 3], w: [3, 4] float32 → [2, 4] float32
func tinyGraph(x, w *graph.Node) *graph.Node {
	return graph.Softmax(graph.MatMul(x, w), -1)
}

var (
	tinyX = [][]float32{{0.5, -1.25, 2}, {3, 0.125, -0.75}}
	tinyW = [][]float32{{0.1, -0.2, 0.3, 0.4}, {1.5, -0.5, 0.25, 0}, {-0.3, 0.8, 0.05, -1}}
)

// tinyReference is tinyGraph in float64 Go.
func tinyReference() [][]float64 {
	out := make([][]float64, len(tinyX))
	for i, row := range tinyX {
		logits := make([]float64, len(tinyW[0]))
		for j := range logits {
			for k, v := range row {
				logits[j] += float64(v) * float64(tinyW[k][j])
			}
		}
		mx := math.Inf(-1)
		for _, l := range logits {
			mx = max(mx, l)
		}
		var sum float64
		for j, l := range logits {
			logits[j] = math.Exp(l - mx)
			sum += logits[j]
		}
		for j := range logits {
			logits[j] /= sum
		}
		out[i] = logits
	}
	return out
}

func runTiny(t *testing.T, b backends.Backend) [][]float32 {
	t.Helper()
	out, err := graph.ExecOnce(b, tinyGraph, tinyX, tinyW)
	require.NoError(t, err)
	defer out.FinalizeAll()
	got, ok := out.Value().([][]float32)
	require.True(t, ok, "result is %T", out.Value())
	return got
}

func requireClose(t *testing.T, want [][]float64, got [][]float32, tol float64) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		require.Len(t, got[i], len(want[i]))
		for j := range want[i] {
			require.InDelta(t, want[i][j], float64(got[i][j]), tol, "[%d][%d]", i, j)
		}
	}
}

func TestGoBackendMatchesReference(t *testing.T) {
	b, err := NewBackend(DefaultBackend)
	require.NoError(t, err)
	defer b.Finalize()
	name, device := BackendInfo(b)
	require.Equal(t, "go", name)
	require.Contains(t, device, "pure Go")
	requireClose(t, tinyReference(), runTiny(t, b), 1e-6)
}

// TestNewBackendBadSpec checks each broken backend gives one clear error, quickly: it
// names the path and says what to do.
func TestNewBackendBadSpec(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.so")
	text := filepath.Join(dir, "text.so")
	require.NoError(t, os.WriteFile(text, []byte("not a library\n"), 0o644))
	fifo := filepath.Join(dir, "fifo.so")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	exe, err := os.Executable() // a Go test binary: ELF, but an executable, not a .so
	require.NoError(t, err)

	for _, tc := range []struct {
		name, spec string
		want       []string
		is         error
	}{
		{name: "missing file", spec: "xla:" + missing, want: []string{missing, "hindsight fetch-xla-cpu"}, is: fs.ErrNotExist},
		{name: "missing with options", spec: "xla:" + missing + ",shared_buffers", want: []string{missing}, is: fs.ErrNotExist},
		{name: "text file named .so", spec: "xla:" + text, want: []string{text, "not a shared library (not an ELF file)", "hindsight fetch-xla-cpu"}},
		{name: "fifo", spec: "xla:" + fifo, want: []string{fifo, "not a regular file"}},
		{name: "directory", spec: "xla:" + dir, want: []string{dir, "not a regular file"}},
		{name: "executable", spec: "xla:" + exe, want: []string{exe, "not a shared library"}},
		{name: "relative path", spec: "xla:cpu", want: []string{"cpu", "not absolute"}},
		{name: "no path", spec: "xla", want: []string{"no plugin path"}},
		{name: "unknown backend", spec: "tpu:x", want: []string{`unknown backend "tpu"`, DefaultBackend}},
		{name: "bad go option", spec: "go:nonsense", want: []string{"go:nonsense", "nonsense"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			b, err := NewBackend(tc.spec)
			require.Error(t, err)
			require.Nil(t, b)
			require.Less(t, time.Since(start), testwait.Guard(time.Minute), "a hang guard: no download or wait before the error")
			msg := err.Error()
			require.NotContains(t, msg, "\n", "one line")
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
			if tc.is != nil {
				require.True(t, errors.Is(err, tc.is), "errors.Is(%v, %v)", err, tc.is)
			}
		})
	}
}

// TestNewBackendCPUPluginMissing checks the short name reports the cache path it
// expected when nothing was fetched.
func TestNewBackendCPUPluginMissing(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(pjrt.CacheEnv, cache)
	t.Setenv(CPUPluginEnv, "")
	_, err := NewBackend("xla-cpu")
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.Contains(t, err.Error(), filepath.Join(cache, "xla-cpu", "pjrt_c_api_cpu_plugin.so"))
	require.Contains(t, err.Error(), "hindsight fetch-xla-cpu")
}

// TestNewBackendOldAPI builds a fake plugin that reports PJRT C API 0.81 and checks it
// is refused with the version in the message, before any client is made.
func TestNewBackendOldAPI(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the fake plugin")
	}
	dirOut, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/gomlx/go-xla").Output()
	if err != nil {
		t.Skipf("locate go-xla's pjrt_c_api.h: %v", err)
	}
	include := filepath.Join(strings.TrimSpace(string(dirOut)), "pkg", "pjrt")
	lib := filepath.Join(t.TempDir(), "pjrt_c_api_old_plugin.so")
	out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, "-I", include, filepath.Join("testdata", "oldapi_plugin.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)

	_, err = NewBackend("xla:" + lib)
	require.Error(t, err)
	require.Contains(t, err.Error(), lib)
	require.Contains(t, err.Error(), "PJRT C API 0.81")
}

// requireXLAEnv, when set (CI sets it), turns a missing XLA CPU plugin from a skip
// into a failure, so CI cannot pass without exercising XLA.
const requireXLAEnv = "HINDSIGHT_REQUIRE_XLA_CPU"

// cpuPlugin returns the XLA CPU plugin to test with ($HINDSIGHT_XLA_CPU_PLUGIN or the
// fetched one) and logs which; it skips the test when there is none.
func cpuPlugin(t *testing.T) string {
	t.Helper()
	return pjrttest.CPUPlugin(t)
}

func TestCPUPluginEnvMatches(t *testing.T) {
	require.Equal(t, CPUPluginEnv, pjrttest.CPUPluginEnv)
	require.Equal(t, requireXLAEnv, pjrttest.RequireEnv)
}

func TestXLACPUMatchesGo(t *testing.T) {
	path := cpuPlugin(t)
	gb, err := NewBackend(DefaultBackend)
	require.NoError(t, err)
	defer gb.Finalize()
	goOut := runTiny(t, gb)
	want := make([][]float64, len(goOut))
	for i, row := range goOut {
		for _, v := range row {
			want[i] = append(want[i], float64(v))
		}
	}

	for _, spec := range []string{"xla:" + path, "xla:" + path + ",shared_buffers"} {
		t.Run(spec, func(t *testing.T) {
			xb, err := NewBackend(spec)
			require.NoError(t, err)
			defer xb.Finalize()
			name, device := BackendInfo(xb)
			require.Equal(t, "xla", name)
			require.Contains(t, device, "PJRT 0.")
			require.Contains(t, device, "plugin "+path)
			t.Logf("xla device: %s", device)

			requireClose(t, want, runTiny(t, xb), 1e-5)
			requireClose(t, tinyReference(), runTiny(t, xb), 1e-6)
		})
	}
}

// TestNewBackendWithOptionsGo: PJRT client options are refused for the pure-Go
// backend, which has no PJRT client; nil options are NewBackend.
func TestNewBackendWithOptionsGo(t *testing.T) {
	_, err := NewBackendWithOptions("go", map[string]any{"preallocate": false})
	require.ErrorContains(t, err, "PJRT client options map[preallocate:false] need an xla plugin")
	b, err := NewBackendWithOptions("go", nil)
	require.NoError(t, err)
	b.Finalize()
}

// TestChooseBackendAuto: auto takes the XLA CPU plugin where it is fetched (the cache,
// or $HINDSIGHT_XLA_CPU_PLUGIN) and pure Go where it is not or does not load, and the
// reason says which and why; a backend named anywhere wins over auto.
func TestChooseBackendAuto(t *testing.T) {
	plugin, pluginErr := CPUPluginPath() // the real one, if fetched: before the environment changes
	if pluginErr == nil {
		_, pluginErr = os.Stat(plugin)
	}
	cache := t.TempDir()
	t.Setenv(pjrt.CacheEnv, cache)
	t.Setenv(CPUPluginEnv, "")
	t.Setenv(GPUPluginEnv, "")
	t.Setenv(backends.ConfigEnvVar, "")
	cached := filepath.Join(cache, "xla-cpu", "pjrt_c_api_cpu_plugin.so")

	c := ChooseBackend("", "", AutoBackend)
	require.Equal(t, DefaultBackend, c.Spec)
	require.Equal(t, "auto (the default): no GPU plugin ($HINDSIGHT_XLA_GPU_PLUGIN unset); XLA CPU plugin not fetched (no "+
		cached+"; `hindsight fetch-xla-cpu` fetches it); pure Go", c.Reason)

	text := filepath.Join(t.TempDir(), "text.so")
	require.NoError(t, os.WriteFile(text, []byte("not a library\n"), 0o644))
	t.Setenv(CPUPluginEnv, text)
	c = ChooseBackend("", "auto", DefaultBackend)
	require.Equal(t, DefaultBackend, c.Spec)
	require.Contains(t, c.Reason, "auto (config backend:): ")
	require.Contains(t, c.Reason, "XLA CPU plugin unusable: XLA plugin "+text+": not a shared library")
	require.NotContains(t, c.Reason, "fetch the CPU plugin")
	require.True(t, strings.HasSuffix(c.Reason, "; pure Go"), c.Reason)

	t.Setenv(GPUPluginEnv, text)
	c = ChooseBackend("", "", AutoBackend)
	require.Equal(t, DefaultBackend, c.Spec, "a GPU plugin that is not one is passed over")
	if hasNVIDIADevice() {
		require.Contains(t, c.Reason, "GPU plugin unusable: XLA plugin "+text)
	} else {
		require.Contains(t, c.Reason, "GPU plugin "+text+" but no NVIDIA device")
	}
	t.Setenv(GPUPluginEnv, "")

	t.Setenv(backends.ConfigEnvVar, "go:parallelism=1")
	c = ChooseBackend("", "", AutoBackend)
	require.Equal(t, Choice{Spec: "go:parallelism=1", Reason: "go:parallelism=1 from $GOMLX_BACKEND"}, c)
	c = ChooseBackend("go", "auto", AutoBackend)
	require.Equal(t, Choice{Spec: "go", Reason: "go from -backend"}, c)
	t.Setenv(backends.ConfigEnvVar, "")

	// With the plugin: named by $HINDSIGHT_XLA_CPU_PLUGIN, then found in the cache.
	if pluginErr != nil {
		if os.Getenv(requireXLAEnv) != "" {
			t.Fatalf("XLA CPU plugin: %v", pluginErr)
		}
		t.Skipf("XLA CPU plugin not available (%v): the rest needs it", pluginErr)
	}
	t.Setenv(CPUPluginEnv, plugin)
	c = ChooseBackend("", "", AutoBackend)
	require.Equal(t, "xla:"+plugin+",shared_buffers", c.Spec)
	require.Contains(t, c.Reason, "XLA CPU plugin "+plugin+" ($HINDSIGHT_XLA_CPU_PLUGIN)")
	t.Setenv(CPUPluginEnv, "")
	require.NoError(t, os.MkdirAll(filepath.Dir(cached), 0o755))
	require.NoError(t, os.Symlink(plugin, cached))
	c = ChooseBackend("auto", "", DefaultBackend)
	require.Equal(t, "xla:"+cached+",shared_buffers", c.Spec)
	require.Equal(t, "auto (-backend): no GPU plugin ($HINDSIGHT_XLA_GPU_PLUGIN unset); XLA CPU plugin "+cached+
		" (fetched by hindsight fetch-xla-cpu)", c.Reason)
	b, err := NewBackend(AutoBackend)
	require.NoError(t, err)
	defer b.Finalize()
	name, _ := BackendInfo(b)
	require.Equal(t, "xla", name)
}

// TestUnboundedGo: a pure-Go spec without a parallelism option gets GoMLX's unlimited
// pool (its bounded one deadlocks in v0.26.0); one that names a parallelism keeps it.
func TestUnboundedGo(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"go", "go:parallelism=-1"},
		{"go:", "go:parallelism=-1"},
		{"go:ops_sequential", "go:ops_sequential,parallelism=-1"},
		{"go:parallelism=2", "go:parallelism=2"},
		{"go:dotgeneral_small,parallelism=0", "go:dotgeneral_small,parallelism=0"},
	} {
		_, config, _ := strings.Cut(c.spec, ":")
		require.Equal(t, c.want, unboundedGo(c.spec, config), c.spec)
	}
}
