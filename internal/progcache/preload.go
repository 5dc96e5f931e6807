package progcache

/*
#include <stdlib.h>
#include "hook.h"
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// maxPreloadBytes bounds what the preloader loads: entries beyond it, the least
// recently used, wait for a request.
const maxPreloadBytes = 1 << 30

// preloader loads the cache's entries in the background, once per configuration, on
// the first client that compiles through the hook (the backend's smoke test, at
// start), so that a restarted process's first step finds its programs loaded. A
// load does not compile again: XLA CPU's serialized executable holds the kernels'
// object code, which the plugin links, beside the optimized HLO, buffer assignment
// and thunks it rebuilds (the qwen3-0.6b gradient program: 6.3 MB, 1.8 s to load
// against 8.6 s to compile; docs/performance.md "Cold start"); but that is still
// CPU time a step would share, and the plugin loads one program at a time. Entries
// load in the order the last process to use them first needed them (cache.touch),
// the order a restart doing the same work asks for them. A request takes a
// preloaded program once (GoMLX owns what it is given), waiting if it is being
// loaded; a program the preloader has not reached is loaded by the request and
// skipped by the preloader. It starts no entry while a Hold is in force (a training
// step). Programs preloaded and never asked for stay loaded until the process ends
// (a few MB of code each).
type preloader struct {
	once   sync.Once
	mu     sync.Mutex
	client *C.PJRT_Client
	slots  map[string]*slot // by key
	quit   chan struct{}    // closed by stop: load no further entry
	done   chan struct{}    // closed when run returns; nil until start

	// The plan: run lists the directory once (listed), then loads queue's keys in
	// order, this run's entries (expect) first.
	listed  []listedEntry
	planned bool
	queue   []string
	ended   bool // run returned: nothing more will be loaded

	// This run's entries (SetRun): the keys the last process of the same run used, in
	// the order it first needed them; want holds those of them on disk, within the
	// preload bound, that are not yet loaded, failed, or claimed by a request, and
	// wantDone is closed when it is empty (or the preloader ends). WaitPreloaded waits
	// on it.
	runKeys  []string
	want     map[string]bool
	wantDone chan struct{}
	wantShut bool // wantDone closed
	wantN    int  // this run's entries to load, as last planned
	runOK    int  // this run's entries preloaded
}

// listedEntry is one entry found on disk when the preload started.
type listedEntry struct {
	key  string
	size int64
	used time.Time
}

// slot is one entry's preload.
type slot struct {
	done  chan struct{} // closed when exe and ok are set
	exe   *C.PJRT_LoadedExecutable
	ok    bool
	taken bool // handed to a request, or claimed by one before the preloader got to it
}

// preloadHook, when set (tests), runs before the preloader loads the entry under key.
var preloadHook func(key string)

func newPreloader() preloader {
	return preloader{quit: make(chan struct{}), wantDone: make(chan struct{})}
}

// start begins preloading on client, the first time it is called.
func (p *preloader) start(c *cache, client *C.PJRT_Client) {
	p.once.Do(func() {
		p.mu.Lock()
		p.client, p.slots = client, map[string]*slot{}
		done := make(chan struct{})
		p.done = done
		p.mu.Unlock()
		go func() {
			defer close(done)
			defer p.end()
			p.run(c)
		}()
	})
}

// stop ends the preloading of a configuration that Configure replaced and waits for
// the entry in hand: the old configuration's preloader must not read, or reject and
// remove, entries that now belong to the new one. A preloader not yet started never
// starts.
func (p *preloader) stop() {
	close(p.quit)
	p.once.Do(func() {})
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done != nil {
		<-done
	}
	p.end()
}

// end marks the preloader finished: a wait for this run's entries returns.
func (p *preloader) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.shutWant()
}

// shutWant closes wantDone once. Called with mu held.
func (p *preloader) shutWant() {
	if !p.wantShut {
		p.wantShut = true
		close(p.wantDone)
	}
}

// settled removes key from the entries a wait is for. Called with mu held.
func (p *preloader) settled(key string) {
	if p.want == nil {
		return
	}
	delete(p.want, key)
	if p.planned && len(p.want) == 0 {
		p.shutWant()
	}
}

// expect names this run's entries, in the order to load them, ahead of the rest.
func (p *preloader) expect(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runKeys = keys
	if p.wantShut && !p.ended {
		p.wantDone, p.wantShut = make(chan struct{}), false
	}
	p.want = map[string]bool{}
	if p.ended {
		p.shutWant()
		return
	}
	if p.planned {
		p.plan()
	}
}

// plan orders the listed entries not yet seen: this run's first, in its order, then
// the rest in the order the last process to use them first needed them, all within
// maxPreloadBytes (this run's entries take their room first, then the most recently
// used). Called with mu held, once the directory is listed.
func (p *preloader) plan() {
	p.planned = true
	byKey := make(map[string]listedEntry, len(p.listed))
	for _, e := range p.listed {
		byKey[e.key] = e
	}
	var total int64
	fits := func(e listedEntry) bool {
		if _, seen := p.slots[e.key]; seen || total+e.size > maxPreloadBytes {
			return false
		}
		total += e.size
		return true
	}
	p.queue = p.queue[:0]
	want := map[string]bool{}
	for _, k := range p.runKeys {
		if s := p.slots[k]; s != nil && s.done != nil && !s.taken && !closed(s.done) {
			want[k] = true // being loaded now: settled when it is
			continue
		}
		if e, ok := byKey[k]; ok && !want[k] && fits(e) {
			want[k] = true
			p.queue = append(p.queue, k)
		}
	}
	rest := make([]listedEntry, 0, len(p.listed))
	for _, e := range p.listed { // most recently used first
		if !want[e.key] && fits(e) {
			rest = append(rest, e)
		}
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].used.Before(rest[j].used) })
	for _, e := range rest {
		p.queue = append(p.queue, e.key)
	}
	if p.want != nil {
		p.want, p.wantN = want, len(want)
	}
	if len(want) == 0 {
		p.shutWant()
	}
}

func closed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// take returns the preloaded program under keyHex for a request on client, waiting
// while it loads. handled is false when the request must read the entry itself: the
// preloader has not reached it (it then never will), already handed it out, failed
// to load it, or preloads for another client.
func (p *preloader) take(client *C.PJRT_Client, keyHex string) (exe *C.PJRT_LoadedExecutable, ok, handled bool) {
	p.mu.Lock()
	if p.slots == nil || client != p.client {
		p.mu.Unlock()
		return nil, false, false
	}
	s := p.slots[keyHex]
	if s == nil || s.taken {
		if s == nil {
			p.slots[keyHex] = &slot{taken: true}
			p.settled(keyHex)
		}
		p.mu.Unlock()
		return nil, false, false
	}
	s.taken = true
	p.mu.Unlock()
	<-s.done
	if !s.ok {
		return nil, false, false
	}
	return s.exe, true, true
}

// run lists the entries made under c's identity and preloads them in plan's order.
func (p *preloader) run(c *cache) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	var all []listedEntry
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), Suffix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			all = append(all, listedEntry{strings.TrimSuffix(e.Name(), Suffix), info.Size(), info.ModTime()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.After(all[j].used) })
	p.mu.Lock()
	p.listed = all
	p.plan()
	p.mu.Unlock()
	for {
		if !waitUnheld(p.quit) {
			return
		}
		p.mu.Lock()
		if len(p.queue) == 0 {
			p.mu.Unlock()
			return
		}
		key := p.queue[0]
		p.queue = p.queue[1:]
		if _, seen := p.slots[key]; seen {
			p.settled(key)
			p.mu.Unlock()
			continue
		}
		s := &slot{done: make(chan struct{})}
		p.slots[key] = s
		p.mu.Unlock()
		if preloadHook != nil {
			preloadHook(key)
		}
		var h header
		s.exe, h, s.ok = c.preloadOne(p.client, key)
		p.mu.Lock()
		wanted := p.want[key]
		p.mu.Unlock()
		if s.ok && wanted && !c.noWarm {
			c.warm(p.client, s.exe, h) // before the slot opens: a request gets it warmed
		}
		close(s.done)
		p.mu.Lock()
		if s.ok && p.want[key] {
			p.runOK++
		}
		p.settled(key)
		p.mu.Unlock()
	}
}

// preloadOne loads the entry under keyHex on client; an entry of another identity is
// left alone (another plugin build sharing the directory), a corrupt one rejected.
func (c *cache) preloadOne(client *C.PJRT_Client, keyHex string) (*C.PJRT_LoadedExecutable, header, bool) {
	start := time.Now()
	raw, err := os.ReadFile(filepath.Join(c.dir, keyHex+Suffix))
	if err != nil {
		return nil, header{}, false // removed meanwhile, or unreadable: a request will see
	}
	if rest, ok := bytes.CutPrefix(raw, []byte(magic)); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		var h header
		if json.Unmarshal(line, &h) == nil && h.Identity != c.identity {
			return nil, header{}, false
		}
	}
	h, payload, err := c.check(keyHex, raw)
	if err != nil {
		c.reject(h.Program, keyHex, err)
		return nil, header{}, false
	}
	var opts unsafe.Pointer
	if len(h.Options) > 0 {
		opts = C.CBytes(h.Options)
		defer C.free(opts)
	}
	exe, err := deserialize(client, payload, (*C.char)(opts), C.size_t(len(h.Options)))
	if err != nil {
		c.reject(h.Program, keyHex, err)
		return nil, header{}, false
	}
	took := time.Since(start)
	statsAdd(func(s *Stats) { s.Preloaded++; s.PreloadTime += took })
	c.log.Debug().Str("program", h.Program).Str("key", keyHex[:16]).Dur("took", took).Msg("compiled program preloaded")
	return exe, h, true
}

// holds counts the Hold calls not yet released.
var holds struct {
	mu   sync.Mutex
	n    int
	free chan struct{} // closed when n falls to 0; nil while n is 0
}

// Hold keeps the background preload from starting another entry until release is
// called (an entry already being loaded finishes). A training step holds it: the
// plugin loads one program at a time and a load is CPU time, so on a machine of few
// cores a preload of programs the step does not need would share the step's CPUs,
// and one the step needs would make its request wait; held, the step's requests
// load what they need themselves and the rest loads after the step. Holds nest.
func Hold() (release func()) {
	holds.mu.Lock()
	holds.n++
	if holds.n == 1 {
		holds.free = make(chan struct{})
	}
	holds.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			holds.mu.Lock()
			defer holds.mu.Unlock()
			holds.n--
			if holds.n == 0 {
				close(holds.free)
				holds.free = nil
			}
		})
	}
}

// waitUnheld waits until no Hold is in force; false if quit closed first.
func waitUnheld(quit <-chan struct{}) bool {
	for {
		holds.mu.Lock()
		free := holds.free
		holds.mu.Unlock()
		if free == nil {
			select {
			case <-quit:
				return false
			default:
				return true
			}
		}
		select {
		case <-free:
		case <-quit:
			return false
		}
	}
}
