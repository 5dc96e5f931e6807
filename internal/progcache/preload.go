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
}

// slot is one entry's preload.
type slot struct {
	done  chan struct{} // closed when exe and ok are set
	exe   *C.PJRT_LoadedExecutable
	ok    bool
	taken bool // handed to a request, or claimed by one before the preloader got to it
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

// run preloads every entry made under c's identity, least recently used first, up to
// maxPreloadBytes.
func (p *preloader) run(c *cache) {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return
	}
	type entry struct {
		key  string
		size int64
		used time.Time
	}
	var all []entry
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), Suffix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil {
			all = append(all, entry{strings.TrimSuffix(e.Name(), Suffix), info.Size(), info.ModTime()})
		}
	}
	// Keep the most recently used that fit, then load them in the order of use.
	sort.Slice(all, func(i, j int) bool { return all[i].used.After(all[j].used) })
	var total int64
	keep := all[:0]
	for _, e := range all {
		if total+e.size <= maxPreloadBytes {
			total += e.size
			keep = append(keep, e)
		}
	}
	sort.Slice(keep, func(i, j int) bool { return keep[i].used.Before(keep[j].used) })
	for _, e := range keep {
		if !waitUnheld(p.quit) {
			return
		}
		p.mu.Lock()
		if _, seen := p.slots[e.key]; seen {
			p.mu.Unlock()
			continue
		}
		s := &slot{done: make(chan struct{})}
		p.slots[e.key] = s
		p.mu.Unlock()
		s.exe, s.ok = c.preloadOne(p.client, e.key)
		close(s.done)
	}
}

// preloadOne loads the entry under keyHex on client; an entry of another identity is
// left alone (another plugin build sharing the directory), a corrupt one rejected.
func (c *cache) preloadOne(client *C.PJRT_Client, keyHex string) (*C.PJRT_LoadedExecutable, bool) {
	start := time.Now()
	raw, err := os.ReadFile(filepath.Join(c.dir, keyHex+Suffix))
	if err != nil {
		return nil, false // removed meanwhile, or unreadable: a request will see
	}
	if rest, ok := bytes.CutPrefix(raw, []byte(magic)); ok {
		line, _, _ := bytes.Cut(rest, []byte("\n"))
		var h header
		if json.Unmarshal(line, &h) == nil && h.Identity != c.identity {
			return nil, false
		}
	}
	h, payload, err := c.check(keyHex, raw)
	if err != nil {
		c.reject(h.Program, keyHex, err)
		return nil, false
	}
	var opts unsafe.Pointer
	if len(h.Options) > 0 {
		opts = C.CBytes(h.Options)
		defer C.free(opts)
	}
	exe, err := deserialize(client, payload, (*C.char)(opts), C.size_t(len(h.Options)))
	if err != nil {
		c.reject(h.Program, keyHex, err)
		return nil, false
	}
	took := time.Since(start)
	statsAdd(func(s *Stats) { s.Preloaded++; s.PreloadTime += took })
	c.log.Debug().Str("program", h.Program).Str("key", keyHex[:16]).Dur("took", took).Msg("compiled program preloaded")
	return exe, true
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
