package xla

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	xlapjrt "github.com/gomlx/go-xla/pkg/pjrt"
	gomlxxla "github.com/gomlx/gomlx/backends/xla"
	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/internal/progcache"
)

// ProgramCache configures the compiled-program cache (internal/progcache): where XLA
// backends keep the programs they compile, so a restarted process loads them instead
// of compiling again.
type ProgramCache struct {
	// Dir holds the entries; "" keeps nothing (compile time is still counted).
	Dir string
	// MaxBytes bounds the entries' total size; the least recently used go first.
	// 0 means progcache.DefaultMaxBytes.
	MaxBytes int64
	// Log gets a line per compile ("compiled program", with took), per program loaded
	// ("compiled program loaded from cache"), per entry rejected or evicted.
	Log zerolog.Logger
	// NoWarm leaves the programs preloaded for this process's run unexecuted until
	// their first use; by default each is executed once on zero inputs at start
	// (progcache.Options.NoWarm), so a restarted process's first step does not finish
	// their loading.
	NoWarm bool
}

// CompileStats are the counts of compiles and cache loads in this process, for every
// XLA backend (progcache.Stats).
type CompileStats = progcache.Stats

// CompileSnapshot returns the process's compile counts so far. They stay zero on the
// pure-Go backend, which compiles nothing.
func CompileSnapshot() CompileStats { return progcache.Snapshot() }

var programCache struct {
	mu       sync.Mutex
	opts     ProgramCache
	plugin   string // the hooked plugin's path, once a backend made with it
	identity string
}

// ConfigureProgramCache sets the cache for the XLA backends of this process, those
// made before (their later compiles) and after. Only one plugin per process is
// cached: the first XLA backend's.
func ConfigureProgramCache(c ProgramCache) error {
	programCache.mu.Lock()
	defer programCache.mu.Unlock()
	programCache.opts = c
	if programCache.plugin == "" {
		return nil
	}
	return progcache.Configure(cacheOptions())
}

func cacheOptions() progcache.Options {
	o := programCache.opts
	return progcache.Options{Dir: o.Dir, MaxBytes: o.MaxBytes, Log: o.Log, Identity: programCache.identity, NoWarm: o.NoWarm}
}

// hookCompiles puts the cache between b's plugin (loaded from path) and its compiles.
// A plugin that cannot be hooked compiles as before, uncounted; that is logged on the
// cache's logger, not an error.
func hookCompiles(b *gomlxxla.Backend, path string) error {
	programCache.mu.Lock()
	defer programCache.mu.Unlock()
	if programCache.plugin != "" {
		return nil // one plugin per process; a second backend on it shares the hook
	}
	id, err := pluginIdentity(b, path)
	if err != nil {
		return err
	}
	programCache.identity = id
	err = progcache.Install(path, cacheOptions())
	if errors.Is(err, progcache.ErrUnsupported) {
		programCache.opts.Log.Warn().Err(err).Msg("compiled programs are not kept across restarts")
		return nil
	}
	if err != nil {
		return err
	}
	programCache.plugin = path
	return nil
}

// pluginIdentity names the plugin build and the device its programs are compiled for:
// the library file (size and modification time: the fetched plugin is pinned by
// sha256, a replaced file changes both), its PJRT C API version and attributes
// (XLA and StableHLO versions), and device 0's description.
func pluginIdentity(b *gomlxxla.Backend, path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("compiled-program cache: plugin %s: %w", path, err)
	}
	p, err := xlapjrt.GetPlugin(path)
	if err != nil {
		return "", fmt.Errorf("compiled-program cache: plugin %s: %w", path, err)
	}
	major, minor := p.Version()
	var attrs []string
	for k, v := range p.Attributes() {
		attrs = append(attrs, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(attrs)
	return fmt.Sprintf("plugin %s size %d mtime %d PJRT %d.%d\nattributes %s\ndevice %s of %d",
		path, info.Size(), info.ModTime().UnixNano(), major, minor, strings.Join(attrs, " "),
		b.DeviceDescription(0), b.NumDevices()), nil
}

// SetProgramRun names the work this process does with one model and shape (train.Open:
// the model's config, precision and training settings), before its backend starts:
// the cache records which programs the run uses, and a restarted process of the same
// run loads those first (progcache.SetRun).
func SetProgramRun(name string) { progcache.SetRun(name) }

// ProgramsPreloaded is what WaitProgramsPreloaded found (progcache.Preload).
type ProgramsPreloaded = progcache.Preload

// WaitProgramsPreloaded waits until the programs this process's run used last time
// are loaded from the cache and executed once (unless ProgramCache.NoWarm), or ctx
// ends (progcache.WaitPreloaded): a restarted daemon pays for the loads and their
// first executions before its first step, not in it.
func WaitProgramsPreloaded(ctx context.Context) (ProgramsPreloaded, error) {
	return progcache.WaitPreloaded(ctx)
}
