package progcache_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	xlapjrt "github.com/gomlx/go-xla/pkg/pjrt"
	"github.com/gomlx/gomlx/backends"
	gomlxxla "github.com/gomlx/gomlx/backends/xla"
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/pjrt"
	"github.com/hindsight-ai/hindsight/internal/progcache"
)

// plugin is the XLA CPU plugin the tests hook: $HINDSIGHT_XLA_CPU_PLUGIN or the
// fetched one; the tests skip without it.
var plugin = sync.OnceValues(func() (backends.Backend, error) {
	path := os.Getenv("HINDSIGHT_XLA_CPU_PLUGIN")
	if path == "" {
		p, err := pjrt.CPU.CachedPath()
		if err != nil {
			return nil, err
		}
		path = p
	}
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	os.Setenv(gomlxxla.NoAutoInstallEnv, "1")
	if _, err := xlapjrt.GetPlugin(path); err != nil {
		return nil, err
	}
	if err := progcache.Install(path, progcache.Options{}); err != nil {
		return nil, err
	}
	return backends.NewWithConfig("xla:" + path)
})

func backend(t *testing.T) backends.Backend {
	b, err := plugin()
	if err != nil {
		t.Skipf("XLA CPU plugin: %v (run `hindsight fetch-xla-cpu`)", err)
	}
	return b
}

// run compiles a fresh program computing x·k+1 (k picks the program) and checks its
// answer, as a restarted process would: a new graph, so a new compile request.
func run(t *testing.T, b backends.Backend, k float32) {
	t.Helper()
	out, err := graph.ExecOnce(b, func(x *graph.Node) *graph.Node {
		return graph.AddScalar(graph.MulScalar(x, float64(k)), 1)
	}, []float32{0, 1, 2})
	require.NoError(t, err)
	require.Equal(t, []float32{1, k + 1, 2*k + 1}, out.Value())
}

type logLines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logLines) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), `"message":"`+msg+`"`)
}

// keys are the entry keys of the lines with message msg, in order.
func (l *logLines) keys(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		var m struct{ Message, Key string }
		if json.Unmarshal([]byte(line), &m) == nil && m.Message == msg {
			keys = append(keys, m.Key)
		}
	}
	return keys
}

func configure(t *testing.T, dir, identity string, maxBytes int64) *logLines {
	t.Helper()
	logs := &logLines{}
	require.NoError(t, progcache.Configure(progcache.Options{Dir: dir, MaxBytes: maxBytes, Identity: identity, Log: zerolog.New(logs)}))
	t.Cleanup(func() { require.NoError(t, progcache.Configure(progcache.Options{})) })
	return logs
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+progcache.Suffix))
	require.NoError(t, err)
	return m
}

func TestCacheHitAfterRecompileRequest(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	logs := configure(t, dir, "test-plugin v1", 0)
	before := progcache.Snapshot()
	run(t, b, 3)
	require.Equal(t, 1, logs.count("compiled program"))
	require.Len(t, entries(t, dir), 1)
	run(t, b, 3)
	require.Equal(t, 1, logs.count("compiled program loaded from cache"), logs.b.String())
	after := progcache.Snapshot()
	require.Equal(t, before.Compiled+1, after.Compiled)
	require.Equal(t, before.Loaded+1, after.Loaded)
}

func TestCacheCorruptEntryRecompiled(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	logs := configure(t, dir, "test-plugin v1", 0)
	run(t, b, 5)
	files := entries(t, dir)
	require.Len(t, files, 1)
	for _, corrupt := range []func([]byte) []byte{
		func(raw []byte) []byte { raw[len(raw)-10] ^= 0xff; return raw }, // a flipped byte in the payload
		func(raw []byte) []byte { return raw[:len(raw)/2] },              // truncated
		func([]byte) []byte { return []byte("garbage") },                 // not an entry at all
	} {
		raw, err := os.ReadFile(files[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(files[0], corrupt(raw), 0o644))
		before := progcache.Snapshot()
		run(t, b, 5)
		after := progcache.Snapshot()
		require.Equal(t, before.Rejected+1, after.Rejected)
		require.Equal(t, before.Compiled+1, after.Compiled, "a corrupt entry is recompiled")
		require.Equal(t, before.Loaded, after.Loaded)
		require.Len(t, entries(t, dir), 1, "the recompiled program replaces the entry")
	}
	require.Equal(t, 3, logs.count("compiled-program cache entry rejected; compiling"))
	run(t, b, 5)
	require.Equal(t, 1, logs.count("compiled program loaded from cache"))
}

func TestCacheOtherPluginVersionIgnored(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	configure(t, dir, "test-plugin v1", 0)
	run(t, b, 7)
	require.Len(t, entries(t, dir), 1)
	v1 := entries(t, dir)[0]

	// Another plugin build never looks the entry up: its key differs.
	logs := configure(t, dir, "test-plugin v2", 0)
	before := progcache.Snapshot()
	run(t, b, 7)
	after := progcache.Snapshot()
	require.Equal(t, before.Compiled+1, after.Compiled)
	require.Equal(t, before.Loaded, after.Loaded)
	require.Equal(t, 0, logs.count("compiled program loaded from cache"))
	require.Len(t, entries(t, dir), 2)

	// An entry whose header names another plugin under the right key (renamed into
	// place) is rejected, not loaded.
	logs = configure(t, dir, "test-plugin v1", 0)
	run(t, b, 7) // a hit: v1's own entry
	require.Equal(t, 1, logs.count("compiled program loaded from cache"))
	logs = configure(t, dir, "test-plugin v2", 0)
	for _, f := range entries(t, dir) {
		if f != v1 {
			require.NoError(t, os.Rename(v1, f)) // v1's entry under v2's key
		}
	}
	before = progcache.Snapshot()
	run(t, b, 7)
	after = progcache.Snapshot()
	require.Equal(t, before.Rejected+1, after.Rejected)
	require.Equal(t, before.Compiled+1, after.Compiled)
	require.Equal(t, 0, logs.count("compiled program loaded from cache"))
}

func TestCacheEvictsLeastRecentlyUsedBySize(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	configure(t, dir, "test-plugin v1", 0)
	run(t, b, 11)
	files := entries(t, dir)
	require.Len(t, files, 1)
	info, err := os.Stat(files[0])
	require.NoError(t, err)
	// Room for two entries of this size (they all are alike), not three.
	logs := configure(t, dir, "test-plugin v1", info.Size()*5/2)
	run(t, b, 12)
	run(t, b, 11) // used again: now the most recent
	require.Equal(t, 1, logs.count("compiled program loaded from cache"))
	before := progcache.Snapshot()
	run(t, b, 13) // the third entry evicts 12, the least recently used
	require.Equal(t, before.Evicted+1, progcache.Snapshot().Evicted)
	require.Len(t, entries(t, dir), 2)
	run(t, b, 11)
	require.Equal(t, 2, logs.count("compiled program loaded from cache"), "11 was kept")
	before = progcache.Snapshot()
	run(t, b, 12)
	require.Equal(t, before.Compiled+1, progcache.Snapshot().Compiled, "12 was evicted")
}

// TestCachePreloadsAtStart: a new configuration (a restarted process) loads the
// directory's entries in the background on its first compile, so the programs are
// loaded before they are asked for; an entry made by another plugin build in a shared
// directory is left alone.
func TestCachePreloadsAtStart(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	configure(t, dir, "test-plugin v2", 0)
	run(t, b, 17) // another build's entry
	other := entries(t, dir)
	require.Len(t, other, 1)
	configure(t, dir, "test-plugin v1", 0)
	run(t, b, 19)
	run(t, b, 23)
	require.Len(t, entries(t, dir), 3)

	logs := configure(t, dir, "test-plugin v1", 0) // the restart
	before := progcache.Snapshot()
	run(t, b, 29) // the first compile starts the preloader
	deadline := time.Now().Add(2 * time.Minute)
	for progcache.Snapshot().Preloaded < before.Preloaded+2 {
		require.True(t, time.Now().Before(deadline), "19 and 23 preloaded")
		time.Sleep(10 * time.Millisecond)
	}
	run(t, b, 19)
	run(t, b, 23)
	after := progcache.Snapshot()
	require.Equal(t, before.Preloaded+2, after.Preloaded, "only this build's entries")
	require.Equal(t, before.Loaded+2, after.Loaded)
	require.Equal(t, before.Compiled+1, after.Compiled, "29 only")
	require.Equal(t, 2, logs.count("compiled program loaded from cache"))
	require.FileExists(t, other[0], "another build's entry is not removed")
	run(t, b, 19) // a second request for a program already handed out loads it again
	require.Equal(t, after.Loaded+1, progcache.Snapshot().Loaded)
}

// TestCachePreloadsInFirstUseOrder: a restart preloads the entries in the order the
// last process first needed them, not last used: a program asked for again later
// (as a step's scoring program is by a later scoring pass) keeps its place before
// the programs first needed after it.
func TestCachePreloadsInFirstUseOrder(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	logs := configure(t, dir, "test-plugin v1", 0)
	run(t, b, 31)
	run(t, b, 37)
	run(t, b, 31) // used again, last
	require.Equal(t, 1, logs.count("compiled program loaded from cache"))
	stored := logs.keys("compiled program stored in cache")
	require.Len(t, stored, 2)

	logs = configure(t, dir, "test-plugin v1", 0) // the restart
	before := progcache.Snapshot()
	run(t, b, 41) // the first compile starts the preloader
	deadline := time.Now().Add(2 * time.Minute)
	for progcache.Snapshot().Preloaded < before.Preloaded+2 {
		require.True(t, time.Now().Before(deadline), "31 and 37 preloaded")
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, stored, logs.keys("compiled program preloaded"), "31 first, as first needed")
}

// TestCachePreloadWaitsWhileHeld: while a Hold is in force (a training step) the
// preloader starts no entry, so a program the step asks for is loaded by its request
// and the rest load once the hold is released.
func TestCachePreloadWaitsWhileHeld(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	configure(t, dir, "test-plugin v1", 0)
	run(t, b, 43)
	run(t, b, 47)

	logs := configure(t, dir, "test-plugin v1", 0) // the restart
	before := progcache.Snapshot()
	release := progcache.Hold()
	run(t, b, 53) // the first compile starts the preloader, which waits
	run(t, b, 47) // the step's request loads its program itself
	held := progcache.Snapshot()
	require.Equal(t, before.Preloaded, held.Preloaded, "nothing preloaded while held")
	require.Equal(t, before.Loaded+1, held.Loaded)
	release()
	release() // a second call does nothing
	deadline := time.Now().Add(2 * time.Minute)
	for progcache.Snapshot().Preloaded < before.Preloaded+1 {
		require.True(t, time.Now().Before(deadline), "43 preloaded once released")
		time.Sleep(10 * time.Millisecond)
	}
	run(t, b, 43)
	require.Equal(t, 2, logs.count("compiled program loaded from cache"))
	require.Equal(t, before.Preloaded+1, progcache.Snapshot().Preloaded, "47 was not preloaded again")
}

// Requests for one program that arrive while it compiles wait for that compile and
// load what it stored: one compile, one entry, the rest counted as loads.
func TestCacheConcurrentRequestsCompileOnce(t *testing.T) {
	b := backend(t)
	dir := t.TempDir()
	logs := configure(t, dir, "test-concurrent", 0)
	before := progcache.Snapshot()
	const requests = 6
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range requests {
		wg.Go(func() {
			<-start
			run(t, b, 13)
		})
	}
	close(start)
	wg.Wait()
	after := progcache.Snapshot()
	require.Equal(t, 1, logs.count("compiled program"), "compiles of one program requested %d times at once", requests)
	require.Equal(t, requests-1, logs.count("compiled program loaded from cache"))
	require.EqualValues(t, 1, after.Compiled-before.Compiled)
	require.EqualValues(t, requests-1, after.Loaded-before.Loaded)
	require.Len(t, entries(t, dir), 1)
}
