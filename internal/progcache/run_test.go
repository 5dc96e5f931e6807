package progcache_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/progcache"
)

// gate blocks the preloader before it loads the entries under the keys it holds,
// until open is called, and records the order the preloader reached entries in.
type gate struct {
	mu      sync.Mutex
	blocked map[string]chan struct{}
	reached []string
}

func newGate(t *testing.T, keys ...string) *gate {
	g := &gate{blocked: map[string]chan struct{}{}}
	for _, k := range keys {
		g.blocked[k] = make(chan struct{})
	}
	progcache.SetPreloadHook(func(key string) {
		g.mu.Lock()
		g.reached = append(g.reached, key)
		ch := g.blocked[key]
		g.mu.Unlock()
		if ch != nil {
			<-ch
		}
	})
	return g
}

// open lets the preloader load every blocked entry; safe to call more than once.
func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, ch := range g.blocked {
		close(ch)
		delete(g.blocked, k)
	}
}

func (g *gate) order() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.reached)
}

func keyOf(path string) string {
	return strings.TrimSuffix(filepath.Base(path), progcache.Suffix)
}

// newKeys are the entries in dir not in before.
func newKeys(t *testing.T, dir string, before []string) []string {
	var keys []string
	for _, e := range entries(t, dir) {
		if !slices.Contains(before, e) {
			keys = append(keys, keyOf(e))
		}
	}
	return keys
}

// runTwoDaemons leaves in dir run A's entries (programs 59 then 61) and run B's (67,
// used before A's, so the oldest), as two daemons of other models sharing one
// directory would, and returns A's keys in first-use order and B's key.
func runTwoDaemons(t *testing.T, dir string) (a []string, b string) {
	be := backend(t)
	t.Cleanup(func() { progcache.SetRun("") })
	progcache.SetRun("run B")
	configure(t, dir, "test-plugin v1", 0)
	run(t, be, 67)
	bKeys := entries(t, dir)
	require.Len(t, bKeys, 1)
	progcache.SetRun("run A")
	configure(t, dir, "test-plugin v1", 0) // another process
	run(t, be, 59)
	a59 := newKeys(t, dir, bKeys)
	require.Len(t, a59, 1)
	run(t, be, 61)
	a61 := newKeys(t, dir, append(bKeys, filepath.Join(dir, a59[0]+progcache.Suffix)))
	require.Len(t, a61, 1)
	a = []string{a59[0], a61[0]}
	return a, keyOf(bKeys[0])
}

// TestCacheWaitsForThisRunOnly: a restarted process of run A waits (WaitPreloaded)
// until A's entries are loaded, which load first, in A's first-use order; run B's
// entry in the same directory, although used before them, is neither loaded first
// nor waited for.
func TestCacheWaitsForThisRunOnly(t *testing.T) {
	be := backend(t)
	dir := t.TempDir()
	t.Cleanup(func() { progcache.SetPreloadHook(nil) })
	a, foreign := runTwoDaemons(t, dir)
	require.Len(t, a, 2)
	orders, err := filepath.Glob(filepath.Join(dir, "*"+progcache.OrderSuffix))
	require.NoError(t, err)
	require.Len(t, orders, 2, "one record per run")

	g := newGate(t, foreign, a[1])
	progcache.SetRun("run A") // train.Open names its run before the backend starts
	configure(t, dir, "test-plugin v1", 0)
	t.Cleanup(g.open) // before the configuration's cleanup, which waits for the preloader
	before := progcache.Snapshot()
	run(t, be, 71) // the first compile starts the preloader

	// A's second entry is held back: the wait does not end.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = progcache.WaitPreloaded(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the wait ends only when this run's entries are loaded")

	// Let A's entry load, keep B's held: the wait ends without it.
	g.mu.Lock()
	close(g.blocked[a[1]])
	delete(g.blocked, a[1])
	g.mu.Unlock()
	ctx, cancel = context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	got, err := progcache.WaitPreloaded(ctx)
	require.NoError(t, err)
	require.Equal(t, progcache.Preload{Run: true, Expected: 2, Loaded: 2}, got)
	require.Equal(t, before.Preloaded+2, progcache.Snapshot().Preloaded, "B's entry is not loaded yet")
	require.Equal(t, []string{a[0], a[1], foreign}, g.order(), "A's entries first, in A's order")
	g.open()
	run(t, be, 59)
	run(t, be, 61)
	require.Equal(t, before.Loaded+2, progcache.Snapshot().Loaded)
	require.Equal(t, before.Compiled+1, progcache.Snapshot().Compiled, "71 only")
}

// TestCacheWaitSkipsBadEntries: an entry of the run that is corrupt is rejected (and
// its program compiled when asked for), one that is gone is not waited for, and
// the wait ends; a process with no run set does not wait at all.
func TestCacheWaitSkipsBadEntries(t *testing.T) {
	be := backend(t)
	dir := t.TempDir()
	a, foreign := runTwoDaemons(t, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, a[0]+progcache.Suffix), []byte("garbage"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(dir, foreign+progcache.Suffix)))

	progcache.SetRun("run A")
	configure(t, dir, "test-plugin v1", 0)
	before := progcache.Snapshot()
	run(t, be, 73)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	got, err := progcache.WaitPreloaded(ctx)
	require.NoError(t, err)
	require.Equal(t, progcache.Preload{Run: true, Expected: 2, Loaded: 1}, got)
	require.Equal(t, before.Rejected+1, progcache.Snapshot().Rejected)
	run(t, be, 59)
	require.Equal(t, before.Compiled+2, progcache.Snapshot().Compiled, "the corrupt entry's program is compiled")

	progcache.SetRun("")
	configure(t, dir, "test-plugin v1", 0)
	run(t, be, 79)
	got, err = progcache.WaitPreloaded(t.Context())
	require.NoError(t, err)
	require.Equal(t, progcache.Preload{}, got, "no run: nothing to wait for")
}

// TestCacheWarmsThisRunsPrograms: a restarted process of run A executes each of A's
// preloaded programs once before WaitPreloaded returns (their inputs read from the
// entries, zeros in them), never run B's; the programs then give the right answers
// when asked for. With NoWarm, or for an entry that does not record its inputs (one
// written before they were recorded), nothing is executed and the program still
// loads and runs.
func TestCacheWarmsThisRunsPrograms(t *testing.T) {
	be := backend(t)
	dir := t.TempDir()
	a, foreign := runTwoDaemons(t, dir)

	wait := func(n int) { // A's record lists n programs by now
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		got, err := progcache.WaitPreloaded(ctx)
		require.NoError(t, err)
		require.Equal(t, progcache.Preload{Run: true, Expected: n, Loaded: n}, got)
	}
	progcache.SetRun("run A")
	logs := configure(t, dir, "test-plugin v1", 0)
	before := progcache.Snapshot()
	run(t, be, 83) // the first compile starts the preloader
	wait(2)
	after := progcache.Snapshot()
	require.Equal(t, before.Warmed+2, after.Warmed, logs.b.String())
	require.Positive(t, after.WarmTime-before.WarmTime)
	require.Equal(t, 2, logs.count("compiled program warmed"), logs.b.String())
	warmed := func(key string) bool {
		return regexp.MustCompile(`"key":"` + key[:16] + `","took":[0-9.]+,"inputs":1,`).MatchString(logs.b.String())
	}
	for _, k := range a {
		require.True(t, warmed(k), "each of A's programs is warmed: %s", logs.b.String())
	}
	require.False(t, warmed(foreign), "B's is not")
	run(t, be, 59)
	run(t, be, 61)
	require.Equal(t, before.Loaded+2, progcache.Snapshot().Loaded)

	progcache.SetRun("run A")
	logs = configure(t, dir, "test-plugin v1", 0)
	require.NoError(t, progcache.Configure(progcache.Options{Dir: dir, Identity: "test-plugin v1", Log: zerolog.New(logs), NoWarm: true}))
	before = progcache.Snapshot()
	run(t, be, 89)
	wait(3) // 59, 61, 83
	require.Equal(t, before.Warmed, progcache.Snapshot().Warmed, "NoWarm")
	require.Zero(t, logs.count("compiled program warmed"))
	run(t, be, 59)

	// An entry written before entries recorded their inputs: loaded, not warmed.
	path := filepath.Join(dir, a[1]+progcache.Suffix)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	old := regexp.MustCompile(`,"inputs":\[.*?\],"inputs_known":true`).ReplaceAll(raw, nil)
	require.Less(t, len(old), len(raw), "the entry records its inputs")
	require.NoError(t, os.WriteFile(path, old, 0o644))
	progcache.SetRun("run A")
	logs = configure(t, dir, "test-plugin v1", 0)
	before = progcache.Snapshot()
	run(t, be, 97)
	wait(4) // 59, 61, 83, 89
	require.Equal(t, before.Warmed+3, progcache.Snapshot().Warmed, "all but 61: %s", logs.b.String())
	require.Contains(t, logs.b.String(), `"reason":"the entry does not record the program's inputs"`)
	run(t, be, 61)
	require.Equal(t, before.Rejected, progcache.Snapshot().Rejected)

	// Programs over warming's bound (here 16 bytes: 12 of input and 12 of output) are
	// loaded and not executed, with the sizes in the reason.
	t.Cleanup(progcache.SetWarmMaxBytes(16))
	progcache.SetRun("run A")
	logs = configure(t, dir, "test-plugin v1", 0)
	before = progcache.Snapshot()
	run(t, be, 107)
	wait(5) // 59, 61, 83, 89, 97
	require.Equal(t, before.Warmed, progcache.Snapshot().Warmed, logs.b.String())
	require.Contains(t, logs.b.String(), `"reason":"it would allocate 24 bytes (inputs 12 bytes, outputs 12 bytes; limit 16 bytes)"`)
	run(t, be, 59)
}

// TestCacheDropsDeadRunRecords: a store's eviction pass removes a run's record none of
// whose entries is left (its programs evicted, or a setting no longer used), keeps
// one that still lists an entry, and keeps this configuration's own.
func TestCacheDropsDeadRunRecords(t *testing.T) {
	be := backend(t)
	dir := t.TempDir()
	t.Cleanup(func() { progcache.SetRun("") })
	progcache.SetRun("run A")
	configure(t, dir, "test-plugin v1", 0)
	run(t, be, 101)
	own, err := filepath.Glob(filepath.Join(dir, "*"+progcache.OrderSuffix))
	require.NoError(t, err)
	require.Len(t, own, 1)
	key := keyOf(entries(t, dir)[0])
	gone := strings.Repeat("ab", 32) // a key with no entry
	dead := filepath.Join(dir, "dead"+progcache.OrderSuffix)
	live := filepath.Join(dir, "live"+progcache.OrderSuffix)
	require.NoError(t, os.WriteFile(dead, []byte(gone+"\n"), 0o644))
	require.NoError(t, os.WriteFile(live, []byte(gone+"\n"+key+"\n"), 0o644))
	progcache.SetRun("run C") // a run with no entries yet: its record is its own
	configure(t, dir, "test-plugin v1", 0)
	run(t, be, 103) // stores, and so evicts
	require.NoFileExists(t, dead)
	require.FileExists(t, live)
	require.FileExists(t, own[0], "run A's record lists 101's entry")
}
