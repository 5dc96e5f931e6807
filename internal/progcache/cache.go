package progcache

/*
#include "hook.h"
*/
import "C"

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// Options configure the cache.
type Options struct {
	// Dir holds the entries; "" keeps nothing on disk (compiles are still counted).
	Dir string
	// MaxBytes bounds the entries' total size: beyond it the least recently used are
	// removed. 0 or less means DefaultMaxBytes.
	MaxBytes int64
	// Identity names the plugin build and the device it compiles for (the xla
	// package gives the plugin's attributes, its file and the device kind). An entry
	// made under another identity is never loaded.
	Identity string
	// Log gets one line per compile, load, rejected entry and eviction.
	Log zerolog.Logger
	// NoWarm leaves the run's preloaded programs unexecuted until their first request.
	// By default each of the run's programs the preloader loads is executed once, on
	// zero inputs, before WaitPreloaded returns (see warm): XLA CPU finishes part of
	// a load on a program's first execution.
	NoWarm bool
}

// DefaultMaxBytes is the size limit when Options.MaxBytes is not set: a SmolLM2 run
// keeps about a dozen programs of a few MB each; a 0.6B run's are larger.
const DefaultMaxBytes = 2 << 30

// Suffix ends every entry's file name.
const Suffix = ".xlaprog"

const magic = "hindsight compiled program 2\n"

type cache struct {
	dir      string
	maxBytes int64
	identity string
	log      zerolog.Logger
	noWarm   bool
	mu       sync.Mutex // serialises eviction within the process
	pre      preloader
	used     sync.Map // keys (hex) used under this configuration: touched once
	run      runState // the run's record of the entries it uses (SetRun)

	flightMu sync.Mutex
	inFlight map[string]chan struct{} // keys (hex) being compiled now, closed when stored or given up
}

var current atomic.Pointer[cache]

// Configure replaces the cache's options; the hook must be installed for them to
// matter. Dir is created if missing. The replaced configuration's background
// preload is stopped first, so it never touches entries under the new one.
func Configure(opts Options) error {
	c := &cache{dir: opts.Dir, maxBytes: opts.MaxBytes, identity: fullIdentity(opts.Identity), log: opts.Log,
		noWarm: opts.NoWarm, pre: newPreloader(), inFlight: map[string]chan struct{}{}}
	if c.maxBytes <= 0 {
		c.maxBytes = DefaultMaxBytes
	}
	if c.dir != "" {
		if err := fsutil.MkdirAll(c.dir, 0o755); err != nil {
			return fmt.Errorf("compiled-program cache dir %s: %w", c.dir, err)
		}
	}
	c.setRun(currentRun())
	if old := current.Swap(c); old != nil {
		old.pre.stop()
	}
	return nil
}

// Stats count the compiles and cache loads of this process.
type Stats struct {
	Compiled    int64         // programs XLA compiled
	CompileTime time.Duration // the time those compiles took
	Loaded      int64         // programs loaded from the cache instead
	LoadTime    time.Duration // the time reading, checking and loading them took
	Preloaded   int64         // entries loaded in the background at start, ahead of any request
	PreloadTime time.Duration // the time that took (off the requests' path)
	Warmed      int64         // preloaded programs of the run executed once on zero inputs at start
	WarmTime    time.Duration // the time those executions took (off the requests' path)
	Stored      int64         // entries written
	Rejected    int64         // entries found corrupt, stale or refused by the plugin, and removed
	Evicted     int64         // entries removed for the size limit
}

var stats struct {
	mu sync.Mutex
	s  Stats
}

// Snapshot returns the counts so far.
func Snapshot() Stats {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	return stats.s
}

// statsAdd applies f to the process's counts.
func statsAdd(f func(*Stats)) {
	stats.mu.Lock()
	defer stats.mu.Unlock()
	f(&stats.s)
}

// fullIdentity adds what the caller cannot know is part of a compile: XLA_FLAGS and
// the host CPU (XLA's CPU backend compiles for the features of the CPU it runs on).
func fullIdentity(id string) string {
	return fmt.Sprintf("%s\nXLA_FLAGS=%s\ncpu=%s", id, os.Getenv("XLA_FLAGS"), hostCPU())
}

var hostCPU = sync.OnceValue(func() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	var model, flags string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && (model == "" || flags == "") {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			model = strings.TrimSpace(v)
		case "flags", "Features":
			sum := sha256.Sum256([]byte(strings.TrimSpace(v)))
			flags = hex.EncodeToString(sum[:8])
		}
	}
	return model + " flags " + flags
})

// program is one compile request, keyed.
type program struct {
	name        string
	keyHex      string
	options     []byte  // a copy of the compile options
	inputs      []param // the main function's inputs, when inputsKnown
	inputsKnown bool
}

func newProgram(args *C.PJRT_Client_Compile_Args, identity string) program {
	format, code, options := programBytes(args)
	h := sha256.New()
	for _, part := range [][]byte{[]byte(identity), format, code, options} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	inputs, known := programParams(code)
	return program{name: moduleName(code), keyHex: hex.EncodeToString(h.Sum(nil)), options: bytes.Clone(options),
		inputs: inputs, inputsKnown: known}
}

var moduleRe = regexp.MustCompile(`^\s*module\s+@("[^"]*"|[\w.$-]+)`)

// moduleName is the MLIR module's name, which GoMLX sets to the graph's name.
func moduleName(code []byte) string {
	m := moduleRe.FindSubmatch(code[:min(len(code), 512)])
	if m == nil {
		return ""
	}
	return strings.Trim(string(m[1]), `"`)
}

// header is the line after the magic in every entry.
type header struct {
	Key      string `json:"key"`
	Identity string `json:"identity"`
	Program  string `json:"program"`
	Options  []byte `json:"options"` // the serialized compile options the key covers
	Size     int    `json:"size"`
	SHA256   string `json:"sha256"`
	// Inputs are the program's inputs (programParams) when InputsKnown; entries
	// without them (older ones, or a program over several devices) are not warmed.
	Inputs      []param `json:"inputs,omitempty"`
	InputsKnown bool    `json:"inputs_known,omitempty"`
}

// claim makes the caller the one request for keyHex in this process until it calls
// the returned release (once the entry is stored, loaded, or the compile failed). If
// another request holds the key, claim waits for it first: two executables of one
// graph, or concurrent passes, ask for the same program, and the later one then loads
// what the earlier compile stored instead of compiling it again.
func (c *cache) claim(keyHex string) (release func()) {
	for {
		c.flightMu.Lock()
		wait, busy := c.inFlight[keyHex]
		if !busy {
			done := make(chan struct{})
			c.inFlight[keyHex] = done
			c.flightMu.Unlock()
			return func() {
				c.flightMu.Lock()
				delete(c.inFlight, keyHex)
				c.flightMu.Unlock()
				close(done)
			}
		}
		c.flightMu.Unlock()
		<-wait
	}
}

func (c *cache) path(keyHex string) string { return filepath.Join(c.dir, keyHex+Suffix) }

// load returns the entry for p loaded on args' client, preloaded if the preloader
// has it; false if there is none or it cannot be trusted (then it is removed, with a
// Warn saying why).
func (c *cache) load(p program, args *C.PJRT_Client_Compile_Args) (*C.PJRT_LoadedExecutable, bool) {
	if exe, ok, handled := c.pre.take(args.client, p.keyHex); handled {
		c.touch(p.keyHex)
		return exe, ok
	}
	_, payload, ok := c.read(p.keyHex, p.name)
	if !ok {
		return nil, false
	}
	exe, err := deserialize(args.client, payload, args.compile_options, args.compile_options_size)
	if err != nil {
		c.reject(p.name, p.keyHex, fmt.Errorf("plugin refused it: %w", err))
		return nil, false
	}
	c.touch(p.keyHex)
	return exe, true
}

// read returns the checked entry under keyHex; false if there is none or it fails a
// check (then it is removed).
func (c *cache) read(keyHex, name string) (header, []byte, bool) {
	raw, err := os.ReadFile(c.path(keyHex))
	if errors.Is(err, fs.ErrNotExist) {
		return header{}, nil, false
	}
	if err != nil {
		c.reject(name, keyHex, fmt.Errorf("read: %w", err))
		return header{}, nil, false
	}
	h, payload, err := c.check(keyHex, raw)
	if err != nil {
		c.reject(name, keyHex, err)
		return header{}, nil, false
	}
	return h, payload, true
}

// touch marks an entry used now, the first time this configuration uses it: so an
// entry's time is when the last process that ran the program first needed it. The
// preloader loads entries in that order, which is the order a restarted process
// that does the same work asks for them (a program used again later, as a step's
// scoring program is by a later scoring pass, is not pushed behind the programs
// first needed after it); eviction takes the entries whose last process to use
// them started using them longest ago.
func (c *cache) touch(keyHex string) {
	if _, seen := c.used.LoadOrStore(keyHex, true); seen {
		return
	}
	c.recordUse(keyHex)
	now := time.Now()
	_ = os.Chtimes(c.path(keyHex), now, now)
}

// check parses an entry and returns its header and payload if every check passes.
func (c *cache) check(keyHex string, raw []byte) (header, []byte, error) {
	var h header
	rest, ok := bytes.CutPrefix(raw, []byte(magic))
	if !ok {
		return h, nil, errors.New("not a compiled-program entry of this version (bad magic)")
	}
	line, payload, ok := bytes.Cut(rest, []byte("\n"))
	if !ok {
		return h, nil, errors.New("truncated header")
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, nil, fmt.Errorf("header: %w", err)
	}
	switch {
	case h.Key != keyHex:
		return h, nil, fmt.Errorf("key %.16s, want %.16s", h.Key, keyHex)
	case h.Identity != c.identity:
		return h, nil, fmt.Errorf("made by another plugin or device: %q", firstLine(h.Identity))
	case h.Size != len(payload):
		return h, nil, fmt.Errorf("payload is %d bytes, header says %d", len(payload), h.Size)
	}
	sum := sha256.Sum256(payload)
	if hex.EncodeToString(sum[:]) != h.SHA256 {
		return h, nil, errors.New("payload sha256 mismatch")
	}
	return h, payload, nil
}

func (c *cache) reject(name, keyHex string, why error) {
	statsAdd(func(s *Stats) { s.Rejected++ })
	path := c.path(keyHex)
	c.log.Warn().Str("program", name).Str("key", keyHex[:16]).Str("path", path).Str("reason", why.Error()).
		Msg("compiled-program cache entry rejected; compiling")
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn().Err(err).Str("path", path).Msg("remove rejected cache entry")
	}
}

// store writes exe's serialization under p's key and evicts beyond the limit. A
// failure is logged and costs only the next start's compile.
func (c *cache) store(p program, exe *C.PJRT_LoadedExecutable) {
	payload, err := serialize(exe)
	if err != nil {
		c.log.Warn().Err(err).Str("program", p.name).Msg("serialize compiled program; not cached")
		return
	}
	sum := sha256.Sum256(payload)
	line, err := json.Marshal(header{Key: p.keyHex, Identity: c.identity, Program: p.name, Options: p.options,
		Size: len(payload), SHA256: hex.EncodeToString(sum[:]), Inputs: p.inputs, InputsKnown: p.inputsKnown})
	if err != nil {
		panic(err) // strings, numbers and bytes always marshal
	}
	size := int64(len(magic) + len(line) + 1 + len(payload))
	if size > c.maxBytes {
		c.log.Warn().Str("program", p.name).Int64("bytes", size).Int64("max_bytes", c.maxBytes).Msg("compiled program larger than the cache; not cached")
		return
	}
	err = fsutil.WriteFile(c.path(p.keyHex), 0o644, func(w io.Writer) error {
		for _, b := range [][]byte{[]byte(magic), line, {'\n'}, payload} {
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		c.log.Warn().Err(err).Str("program", p.name).Msg("write compiled program; not cached")
		return
	}
	if _, seen := c.used.LoadOrStore(p.keyHex, true); !seen { // written now: its first use
		c.recordUse(p.keyHex)
	}
	statsAdd(func(s *Stats) { s.Stored++ })
	c.log.Debug().Str("program", p.name).Str("key", p.keyHex[:16]).Int64("bytes", size).Msg("compiled program stored in cache")
	c.evict(p.keyHex)
}

// evict removes the least recently used entries until the rest fit in maxBytes,
// never the one just written (keep), then the runs' records that list no entry left
// (dropRecords).
func (c *cache) evict(keep string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		c.log.Warn().Err(err).Str("dir", c.dir).Msg("list compiled-program cache")
		return
	}
	type entry struct {
		name string
		size int64
		used time.Time
	}
	var all []entry
	var total int64
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), Suffix) || !e.Type().IsRegular() {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile by another process
		}
		all = append(all, entry{e.Name(), info.Size(), info.ModTime()})
		total += info.Size()
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.Before(all[j].used) })
	for _, e := range all {
		if total <= c.maxBytes {
			break
		}
		if e.name == keep+Suffix {
			continue
		}
		if err := os.Remove(filepath.Join(c.dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn().Err(err).Str("entry", e.name).Msg("evict compiled program")
			continue
		}
		total -= e.size
		statsAdd(func(s *Stats) { s.Evicted++ })
		c.log.Info().Str("entry", e.name).Int64("bytes", e.size).Int64("cache_bytes", total).Msg("compiled program evicted from cache")
	}
	c.dropRecords()
}

func (c *cache) logCompiled(name string, took time.Duration) {
	c.log.Info().Str("program", name).Dur("took", took).Msg("compiled program")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
