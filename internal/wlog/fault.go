package wlog

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A full disk cannot be made on demand (no small file system in CI), so tests inject
// it here: a Fault makes one chosen append fail as ENOSPC would, in the middle of its
// write or at its fsync. In-process tests call InjectFault; binaries built with the
// fsfault tag read FaultEnv at start (fault_env.go), so the end-to-end tests can fail
// the real daemon's appends. Without either, an append pays one uncontended lock
// (beside its fsync).

// FaultEnv names the variable that a binary built with the fsfault tag reads at
// start: a comma-separated list of NAME:N[:PHASE] (see ParseFaults).
const FaultEnv = "HINDSIGHT_FSFAULT_WLOG"

// Fault phases.
const (
	// FaultWrite writes half of the line, then fails with ENOSPC.
	FaultWrite = "write"
	// FaultSync writes the whole line, then its fsync fails with ENOSPC.
	FaultSync = "sync"
)

// errNoSpace is the injected failure.
var errNoSpace error = syscall.ENOSPC

// Fault fails one append of the logs whose file name matches Name.
type Fault struct {
	Name   string // a filepath.Match pattern of the log file's base name ("journal.jsonl", "*.jsonl")
	Append int    // which append fails, counting from 1 over this process's appends to matching logs
	Phase  string // FaultWrite or FaultSync

	seen int // appends counted so far
}

var faults struct {
	sync.Mutex
	list []*Fault
}

// InjectFault arms f until the returned function disarms it. For tests.
func InjectFault(f Fault) (disarm func()) {
	p := &f
	faults.Lock()
	faults.list = append(faults.list, p)
	faults.Unlock()
	return func() {
		faults.Lock()
		defer faults.Unlock()
		for i, q := range faults.list {
			if q == p {
				faults.list = append(faults.list[:i], faults.list[i+1:]...)
				return
			}
		}
	}
}

// ParseFaults parses FaultEnv's value: NAME:N[:PHASE],… where PHASE is write (the
// default) or sync, e.g. "journal.jsonl:3,skipped.txt:1:sync".
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	for _, item := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(item), ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("%s: %q is not NAME:N[:PHASE]", FaultEnv, item)
		}
		if _, err := filepath.Match(parts[0], ""); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", FaultEnv, item, err)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q: N must be a whole number ≥ 1", FaultEnv, item)
		}
		f := Fault{Name: parts[0], Append: n, Phase: FaultWrite}
		if len(parts) == 3 {
			f.Phase = parts[2]
		}
		if f.Phase != FaultWrite && f.Phase != FaultSync {
			return nil, fmt.Errorf("%s: %q: phase must be %s or %s", FaultEnv, item, FaultWrite, FaultSync)
		}
		out = append(out, f)
	}
	return out, nil
}

// faultFor counts an append to the log at path and returns the phase at which it is
// to fail, or "".
func faultFor(path string) string {
	faults.Lock()
	defer faults.Unlock()
	if len(faults.list) == 0 {
		return ""
	}
	base := filepath.Base(path)
	phase := ""
	for _, f := range faults.list {
		if ok, _ := filepath.Match(f.Name, base); !ok {
			continue
		}
		f.seen++
		if f.seen == f.Append && phase == "" {
			phase = f.Phase
		}
	}
	return phase
}
