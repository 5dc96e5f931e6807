// Command loadtime measures what loading a compiled-program cache costs: it starts
// an XLA CPU backend on a copy of a program cache (internal/progcache), lets the
// background preloader load every entry with nothing else running, and prints each
// entry's size on disk and load time, and the process's CPU seconds for the whole
// preload (docs/performance.md "Cold start").
//
//	go run ./bench/coldstart/loadtime -dir PROGRAMS
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/hindsight-ai/hindsight/internal/progcache"
	"github.com/hindsight-ai/hindsight/xla"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func main() {
	dir := flag.String("dir", "", "a program cache `directory` (it is read, and entries of another identity are left alone)")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "loadtime: -dir is required")
		os.Exit(2)
	}
	entries, _ := filepath.Glob(filepath.Join(*dir, "*"+progcache.Suffix))
	sizes := map[string]int64{}
	for _, e := range entries {
		if info, err := os.Stat(e); err == nil {
			sizes[strings.TrimSuffix(filepath.Base(e), progcache.Suffix)[:16]] = info.Size()
		}
	}
	pr, pw := io.Pipe()
	lines := make(chan map[string]any, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	log := zerolog.New(pw).Level(zerolog.DebugLevel)
	if err := xla.ConfigureProgramCache(xla.ProgramCache{Dir: *dir, Log: log}); err != nil {
		fmt.Fprintln(os.Stderr, "loadtime:", err)
		os.Exit(1)
	}
	cpu0, wall0 := cpuSeconds(), time.Now()
	b, err := xla.NewBackend("xla-cpu")
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadtime:", err)
		os.Exit(1)
	}
	defer b.Finalize()
	type row struct {
		program, key string
		took         float64
	}
	var rows []row
	// Every entry is preloaded or rejected, but for the smoke test's own program
	// when its request came first (then 3 s without a change end the wait).
	deadline := time.Now().Add(30 * time.Minute)
	var last int64
	lastChange := time.Now()
	for time.Now().Before(deadline) {
		s := progcache.Snapshot()
		n := s.Preloaded + s.Rejected
		if n >= int64(len(entries)) || (n == int64(len(entries))-1 && time.Since(lastChange) > 3*time.Second) {
			break
		}
		if n != last {
			last, lastChange = n, time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	pw.Close()
	for m := range lines {
		if m["message"] == "compiled program preloaded" {
			rows = append(rows, row{m["program"].(string), m["key"].(string), m["took"].(float64)})
		}
	}
	cpu, wall := cpuSeconds()-cpu0, time.Since(wall0).Seconds()
	sort.Slice(rows, func(i, j int) bool { return rows[i].took > rows[j].took })
	fmt.Println("| program | key | MB on disk | load s (wall) |")
	fmt.Println("|---|---|---|---|")
	var total float64
	for _, r := range rows {
		total += r.took / 1000
		fmt.Printf("| %s | %s | %.2f | %.2f |\n", strings.TrimPrefix(r.program, "Exec_github_com_hindsight_ai_hindsight_xla_"), r.key, float64(sizes[r.key])/1e6, r.took/1000)
	}
	fmt.Printf("\n%d entries preloaded in %.2f s of loads; the process (backend start included): %.2f CPU-s, %.2f s wall\n", len(rows), total, cpu, wall)
}
