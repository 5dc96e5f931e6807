// Package pjrt fetches the pinned PJRT plugins hindsight runs XLA with and says where
// they are cached. It sits before everything else in the data flow: the xla package
// asks it where the `xla-cpu` plugin lives, and `hindsight fetch-xla-cpu` puts it there.
//
// A plugin comes from exactly one place: a wheel on PyPI, downloaded with
// `pip download --no-deps` at a pinned version, checked against a sha256 committed
// here, and unpacked to `<cache>/<name>/<file>` (only the plugin library, nothing else).
// Nothing is pip-installed and GoMLX's own downloader is never used.
package pjrt

import (
	"fmt"
	"os"
	"path/filepath"
)

// CacheEnv names the environment variable that overrides the plugin cache directory.
const CacheEnv = "HINDSIGHT_PJRT_CACHE"

// Plugin is a PJRT plugin shipped inside a pinned PyPI wheel.
type Plugin struct {
	Name       string // short backend name and cache subdirectory, e.g. "xla-cpu"
	Package    string // PyPI project
	Version    string // exact version
	Wheel      string // exact wheel file name pip must produce
	WheelSHA   string // sha256 of the wheel, hex
	WheelSize  int64  // bytes, a quick check before hashing
	Member     string // path of the plugin library inside the wheel
	LibSHA     string // sha256 of the library itself, hex: checks the cached copy
	File       string // file name in the cache directory
	APIVersion string // the PJRT C API version the library reports, e.g. "0.115"
}

// CPU is XLA's CPU PJRT plugin as shipped in lammps-jax-pjrt-cpu 0.11.2: built from the
// XLA of jaxlib 0.11.2, PJRT C API 0.115, manylinux_2_27 (needs glibc ≥ 2.27 and
// libstdc++ with GLIBCXX_3.4.22). docs/performance.md "Backends: pure Go and XLA on CPU" says why the other candidates
// were rejected.
var CPU = Plugin{
	Name:       "xla-cpu",
	Package:    "lammps-jax-pjrt-cpu",
	Version:    "0.11.2",
	Wheel:      "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl",
	WheelSHA:   "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
	WheelSize:  62711338,
	Member:     "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
	LibSHA:     "ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2",
	File:       "pjrt_c_api_cpu_plugin.so",
	APIVersion: "0.115",
}

// CacheDir returns the directory plugins are cached in: $HINDSIGHT_PJRT_CACHE, else
// <user cache dir>/hindsight/pjrt (~/.cache/hindsight/pjrt on Linux).
func CacheDir() (string, error) {
	if dir := os.Getenv(CacheEnv); dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("plugin cache dir $%s=%s: %w", CacheEnv, dir, err)
		}
		return abs, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("plugin cache dir: %w (set $%s)", err, CacheEnv)
	}
	return filepath.Join(base, "hindsight", "pjrt"), nil
}

// Path returns where the plugin library lives under cacheDir.
func (p Plugin) Path(cacheDir string) string {
	return filepath.Join(cacheDir, p.Name, p.File)
}

// CachedPath returns the plugin's path in the default cache directory, whether or not
// it has been fetched.
func (p Plugin) CachedPath() (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	return p.Path(dir), nil
}
