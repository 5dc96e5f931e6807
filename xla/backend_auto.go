package xla

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gomlx/gomlx/backends"
)

// AutoBackend is the backend spec that picks the fastest backend this machine has
// (hindsightd's default): a GPU plugin where one is installed, else the XLA CPU plugin
// where it has been fetched, else pure Go (docs/performance.md "Which backend").
const AutoBackend = "auto"

// GPUPluginEnv names the environment variable that points `auto` at a PJRT GPU plugin
// (e.g. JAX's xla_cuda_plugin.so). hindsight fetches no GPU plugin, so without it auto
// never picks a GPU.
const GPUPluginEnv = "HINDSIGHT_XLA_GPU_PLUGIN"

// Choice is a backend spec and why it was chosen.
type Choice struct {
	// Spec is what NewBackend takes (`auto` and `xla-cpu` resolved).
	Spec string
	// Reason says where the spec came from (the -backend flag, the config's
	// backend:, $GOMLX_BACKEND, the default) and, for auto, what it found.
	Reason string
}

// ChooseBackend resolves the backend as ResolveBackend does, with fallback (e.g.
// AutoBackend or DefaultBackend) where neither the flag, the config nor
// $GOMLX_BACKEND names one, and says why.
func ChooseBackend(flag, config, fallback string) Choice {
	spec, from := fallback, "the default"
	for _, s := range []struct{ spec, from string }{
		{flag, "-backend"}, {config, "config backend:"}, {os.Getenv(backends.ConfigEnvVar), "$" + backends.ConfigEnvVar},
	} {
		if v := strings.TrimSpace(s.spec); v != "" {
			spec, from = v, s.from
			break
		}
	}
	if spec == AutoBackend {
		c := chooseAuto()
		c.Reason = fmt.Sprintf("auto (%s): %s", from, c.Reason)
		return c
	}
	if name, opts, ok := cutCPUPlugin(spec); ok {
		if path, err := CPUPluginPath(); err == nil {
			return Choice{Spec: "xla:" + path + opts, Reason: fmt.Sprintf("%s from %s", spec, from)}
		}
		return Choice{Spec: name + opts, Reason: fmt.Sprintf("%s from %s", spec, from)}
	}
	return Choice{Spec: spec, Reason: fmt.Sprintf("%s from %s", spec, from)}
}

// chooseAuto tries the candidates in order; each one passed over adds why to the reason.
func chooseAuto() Choice {
	var skipped []string
	if path := os.Getenv(GPUPluginEnv); path == "" {
		skipped = append(skipped, "no GPU plugin ($"+GPUPluginEnv+" unset)")
	} else if !hasNVIDIADevice() {
		skipped = append(skipped, fmt.Sprintf("GPU plugin %s but no NVIDIA device (/dev/nvidia*)", path))
	} else if err := checkPluginFile(path); err != nil {
		skipped = append(skipped, fmt.Sprintf("GPU plugin unusable: %s", err))
	} else {
		return Choice{Spec: "xla:" + path, Reason: fmt.Sprintf("GPU plugin %s ($%s)", path, GPUPluginEnv)}
	}

	path, err := CPUPluginPath()
	from := "fetched by hindsight fetch-xla-cpu"
	if os.Getenv(CPUPluginEnv) != "" {
		from = "$" + CPUPluginEnv
	}
	switch {
	case err != nil:
		skipped = append(skipped, fmt.Sprintf("no XLA CPU plugin (%v)", err))
	default:
		if _, statErr := os.Stat(path); statErr != nil {
			skipped = append(skipped, fmt.Sprintf("XLA CPU plugin not fetched (no %s; `hindsight fetch-xla-cpu` fetches it)", path))
		} else if err := checkPluginFile(path); err != nil {
			skipped = append(skipped, fmt.Sprintf("XLA CPU plugin unusable: %s", err))
		} else {
			_, opts, _ := cutCPUPlugin(CPUPluginName)
			return Choice{Spec: "xla:" + path + opts, Reason: strings.Join(append(skipped, fmt.Sprintf("XLA CPU plugin %s (%s)", path, from)), "; ")}
		}
	}
	return Choice{Spec: DefaultBackend, Reason: strings.Join(append(skipped, "pure Go"), "; ")}
}

// checkPluginFile is checkPlugin for a bare path, with a message that does not tell
// the user to fetch what auto merely passes over.
func checkPluginFile(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	if err := checkPlugin(abs); err != nil {
		msg := err.Error()
		if i := strings.LastIndex(msg, "; fetch the CPU plugin"); i > 0 {
			msg = msg[:i]
		}
		return fmt.Errorf("%s", msg)
	}
	return nil
}

// hasNVIDIADevice reports whether an NVIDIA GPU device node exists.
func hasNVIDIADevice() bool {
	m, _ := filepath.Glob("/dev/nvidia[0-9]*")
	return len(m) > 0
}
