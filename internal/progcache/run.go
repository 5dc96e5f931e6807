package progcache

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/hindsight-ai/hindsight/internal/fsutil"
)

// A run is the work a process does with one model and shape (train.Open names it by
// the model's config, precision and training settings). A directory may be shared
// by several daemons, of other models or shapes: the cache records, per run, which
// entries the run used in the order it first needed them (OrderSuffix, a file beside
// the entries), so that a later process naming the same run loads those first and
// can wait for them before its first step (WaitPreloaded), and not for the others.

// OrderSuffix ends the name of each run's record of the entries it uses: one key
// (hex) a line, in first-use order. It is advisory: a missing, torn or stale record
// costs only the wait (an entry it lists that is gone is not waited for, a torn line
// is skipped).
const OrderSuffix = ".order"

var runName struct {
	mu   sync.Mutex
	name string
}

// SetRun names this process's run ("" for none): its entries are recorded under
// that name from now on, and the background preload of the current configuration
// (and of later ones) loads the entries the last process of that run used first.
func SetRun(name string) {
	runName.mu.Lock()
	runName.name = name
	runName.mu.Unlock()
	if c := current.Load(); c != nil {
		c.setRun(name)
	}
}

func currentRun() string {
	runName.mu.Lock()
	defer runName.mu.Unlock()
	return runName.name
}

// runState is a configuration's record of its run.
type runState struct {
	mu       sync.Mutex
	file     string   // the run's record; "" with no run or no directory
	prior    []string // the record as the run's last process left it
	firstUse []string // keys first used under this configuration, in order
}

// setRun reads name's record and has the preloader load its entries first.
func (c *cache) setRun(name string) {
	if c.dir == "" {
		return
	}
	var file string
	var prior []string
	if name != "" {
		sum := sha256.Sum256([]byte(name))
		file = filepath.Join(c.dir, hex.EncodeToString(sum[:16])+OrderSuffix)
		prior = readOrder(file)
	}
	c.run.mu.Lock()
	c.run.file, c.run.prior = file, prior
	c.run.mu.Unlock()
	if name != "" {
		c.pre.expect(prior)
	}
}

// readOrder returns the keys a record lists; nil if there is none.
func readOrder(file string) []string {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var keys []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		k := strings.TrimSpace(sc.Text())
		if _, err := hex.DecodeString(k); err == nil && len(k) == 2*sha256.Size {
			keys = append(keys, k)
		}
	}
	return keys
}

// recordUse notes keyHex's first use under this configuration and, with a run set,
// rewrites the run's record: this process's first uses in order, then what the
// last process used that this one has not yet (a short run does not forget the
// programs of a longer one). The record is replaced as every file of the cache is
// (fsutil.WriteFileBytes: temp file, fsync, rename, fsync the directory), once per
// program a process first uses.
func (c *cache) recordUse(keyHex string) {
	c.run.mu.Lock()
	defer c.run.mu.Unlock()
	c.run.firstUse = append(c.run.firstUse, keyHex)
	if c.run.file == "" {
		return
	}
	var b strings.Builder
	for _, k := range c.run.firstUse {
		b.WriteString(k + "\n")
	}
	for _, k := range c.run.prior {
		if !slices.Contains(c.run.firstUse, k) {
			b.WriteString(k + "\n")
		}
	}
	if err := fsutil.WriteFileBytes(c.run.file, []byte(b.String()), 0o644); err != nil {
		c.log.Debug().Err(err).Str("path", c.run.file).Msg("record the run's compiled programs")
	}
}

// Preload is what WaitPreloaded found.
type Preload struct {
	Run      bool // a run is set and its record lists entries
	Expected int  // this run's entries the preloader was to load
	Loaded   int  // of them, loaded by the preloader (the rest failed, or a request took them first)
}

// WaitPreloaded waits until the background preload has settled every entry the
// current configuration's run used last time (loaded and, unless NoWarm, warmed;
// rejected; or claimed by a request) or ctx ends; the other entries of the directory are not waited for. It
// returns at once when no run is set, the cache keeps nothing on disk, or nothing
// has compiled yet (the preload starts on the first compile). The error is ctx's:
// the preload goes on, and a program it has not reached is loaded by its request.
func WaitPreloaded(ctx context.Context) (Preload, error) {
	c := current.Load()
	if c == nil || c.dir == "" {
		return Preload{}, nil
	}
	p := &c.pre
	p.mu.Lock()
	if p.slots == nil || p.want == nil {
		p.mu.Unlock()
		return Preload{}, nil
	}
	done := p.wantDone
	p.mu.Unlock()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("wait for compiled programs to preload: %w", ctx.Err())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return Preload{Run: len(p.runKeys) > 0, Expected: p.wantN, Loaded: p.runOK}, err
}

// dropRecords removes the runs' records (OrderSuffix) none of whose entries is left
// in the directory: a run whose programs were all evicted, or one of a model or
// setting no longer used, would otherwise leave its record behind for good. This
// configuration's own record is kept. Another process's record lists the entries it
// has written, so it is never empty of them while its run goes on.
func (c *cache) dropRecords() {
	records, err := filepath.Glob(filepath.Join(c.dir, "*"+OrderSuffix))
	if err != nil || len(records) == 0 {
		return
	}
	c.run.mu.Lock()
	own := c.run.file
	c.run.mu.Unlock()
	for _, r := range records {
		if r == own {
			continue
		}
		live := false
		for _, k := range readOrder(r) {
			if _, err := os.Stat(filepath.Join(c.dir, k+Suffix)); err == nil {
				live = true
				break
			}
		}
		if live {
			continue
		}
		if err := os.Remove(r); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Warn().Err(err).Str("path", r).Msg("remove a run's record of compiled programs")
			continue
		}
		c.log.Debug().Str("path", r).Msg("run's record of compiled programs removed: none of its programs is left")
	}
}
