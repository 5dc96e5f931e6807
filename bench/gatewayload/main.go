// Command gatewayload is the gateway's load benchmark (not run in CI): it builds the
// real binaries, makes the tiny byte-tokenizer model, starts hindsightd with the
// gateway on (training off, so the gateway is measured alone, and the spool still
// validates every recorded session), runs -sessions concurrent conversations of
// -turns turns each for -duration (each conversation closed and a new one begun
// when done), samples the daemon's RSS every second from /proc/PID/status, sends
// SIGTERM, and reports requests/s, latency percentiles, RSS in the first and last
// quarter of the run, and the sessions the spool accepted. It prints a summary and
// writes gatewayload.json into -out.
//
// -long 2000,4000 measures long prompts instead: one request of each length (a user
// message of that many bytes: about as many tokens with the byte tokenizer), twice
// (the first compiles what the length needs, the second is warm), each with its
// latency and the daemon's CPU seconds meanwhile (/proc/PID/stat). -preset and
// -backend pick the model shape (init-model -preset, random weights) and backend.
//
//	go run ./bench/gatewayload -sessions 32 -duration 60s -out /tmp/gwload
//	go run ./bench/gatewayload -preset smollm2-135m -backend xla-cpu -long 2000,4000
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type report struct {
	Sessions        int     `json:"concurrent_sessions"`
	Turns           int     `json:"turns_per_conversation"`
	MaxTokens       int     `json:"max_tokens"`
	DurationS       float64 `json:"duration_s"`
	Requests        int     `json:"requests"`
	Errors          int     `json:"errors"`
	RequestsPerS    float64 `json:"requests_per_s"`
	TokensPerS      float64 `json:"completion_tokens_per_s"`
	P50MS           float64 `json:"p50_ms"`
	P99MS           float64 `json:"p99_ms"`
	MaxMS           float64 `json:"max_ms"`
	Conversations   int     `json:"conversations_closed"`
	RSSFirstQuarter int64   `json:"rss_first_quarter_bytes"`
	RSSLastQuarter  int64   `json:"rss_last_quarter_bytes"`
	RSSPeak         int64   `json:"rss_peak_bytes"`
	RolloutsDone    int     `json:"rollout_files_done"`
	RolloutsFailed  int     `json:"rollout_files_failed"`
	Backend         string  `json:"backend"`
	MaxBatch        int     `json:"max_batch"`
}

func main() {
	sessions := flag.Int("sessions", 32, "concurrent conversations")
	duration := flag.Duration("duration", 60*time.Second, "how long to send requests")
	turns := flag.Int("turns", 4, "turns per conversation before it is closed")
	maxTokens := flag.Int("max-tokens", 16, "max_tokens per request")
	out := flag.String("out", "", "output folder (default: a temp folder)")
	maxBatch := flag.Int("max-batch", 8, "gateway.max_batch: requests sampled together (1: one at a time)")
	preset := flag.String("preset", "", "init-model -preset of the served model (default: init-model's)")
	backend := flag.String("backend", "", "hindsightd -backend (default: the daemon's)")
	long := flag.String("long", "", "comma-separated prompt `lengths` (bytes): time one long request of each, cold then warm, instead of the load run")
	flag.Parse()
	if err := run(*sessions, *duration, *turns, *maxTokens, *maxBatch, *out, *preset, *backend, *long); err != nil {
		fmt.Fprintln(os.Stderr, "gatewayload:", err)
		os.Exit(1)
	}
}

func run(sessions int, duration time.Duration, turns, maxTokens, maxBatch int, out, preset, backendSpec, long string) error {
	if out == "" {
		var err error
		if out, err = os.MkdirTemp("", "gatewayload-"); err != nil {
			return err
		}
	}
	bin, data := filepath.Join(out, "bin"), filepath.Join(out, "data")
	os.RemoveAll(data)
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/hindsightd", "./cmd/hindsight")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	initArgs := []string{"init-model", "-out", filepath.Join(data, "model"), "-seed", "2"}
	if preset != "" {
		initArgs = append(initArgs, "-preset", preset)
	}
	if b, err := exec.Command(filepath.Join(bin, "hindsight"), initArgs...).CombinedOutput(); err != nil {
		return fmt.Errorf("init-model: %v: %s", err, b)
	}
	cfg := fmt.Sprintf("data_dir: %s\nlisten: 127.0.0.1:0\nlog: {format: json}\nmodel: {dir: %s}\ntrain: {enabled: false}\n"+
		"gateway: {enabled: true, listen: 127.0.0.1:0, idle_timeout: 1h, feedback_window: 0s, max_batch: %d}\n", data, filepath.Join(data, "model"), maxBatch)
	cfgPath := filepath.Join(out, "hindsightd.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	daemonArgs := []string{"-config", cfgPath}
	if backendSpec != "" {
		daemonArgs = append(daemonArgs, "-backend", backendSpec)
	}
	cmd := exec.Command(filepath.Join(bin, "hindsightd"), daemonArgs...)
	logFile, err := os.Create(filepath.Join(out, "hindsightd.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	pr, pw := io.Pipe()
	cmd.Stderr = io.MultiWriter(logFile, pw)
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	addr, backend, err := waitServing(pr)
	if err != nil {
		return err
	}
	go io.Copy(io.Discard, pr)
	base := "http://" + addr + "/v1"
	if long != "" {
		defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
		return runLong(base, cmd.Process.Pid, long, maxTokens, backend)
	}

	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var rss []int64
	rssDone := make(chan struct{})
	go func() {
		defer close(rssDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				rss = append(rss, readRSS(cmd.Process.Pid))
			}
		}
	}()
	var mu sync.Mutex
	var lat []time.Duration
	var errs, tokens, closed int
	var wg sync.WaitGroup
	start := time.Now()
	for w := range sessions {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Minute}
			for conv := 0; ctx.Err() == nil; conv++ {
				id := fmt.Sprintf("load-%d-%d", w, conv)
				msgs := []map[string]any{{"role": "user", "content": fmt.Sprintf("conversation %d of worker %d", conv, w)}}
				for turn := 0; turn < turns && ctx.Err() == nil; turn++ {
					body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": maxTokens, "seed": turn})
					t0 := time.Now()
					v, err := post(client, base+"/chat/completions", id, body)
					d := time.Since(t0)
					mu.Lock()
					if err != nil {
						errs++
					} else {
						lat = append(lat, d)
						tokens += int(v["usage"].(map[string]any)["completion_tokens"].(float64))
					}
					mu.Unlock()
					if err != nil {
						break
					}
					msg := v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
					msgs = append(msgs, msg, map[string]any{"role": "user", "content": "and then?"})
				}
				if _, err := post(client, base+"/sessions/"+id+"/close", "", []byte(`{"reward": 0}`)); err == nil {
					mu.Lock()
					closed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	<-rssDone
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()

	r := report{Sessions: sessions, Turns: turns, MaxTokens: maxTokens, DurationS: elapsed.Seconds(), Requests: len(lat), Errors: errs,
		RequestsPerS: float64(len(lat)) / elapsed.Seconds(), TokensPerS: float64(tokens) / elapsed.Seconds(), Conversations: closed, Backend: backend, MaxBatch: maxBatch}
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		r.P50MS, r.P99MS, r.MaxMS = ms(lat[n/2]), ms(lat[min(n-1, n*99/100)]), ms(lat[n-1])
	}
	if n := len(rss); n >= 4 {
		r.RSSFirstQuarter, r.RSSLastQuarter = slices.Max(rss[:n/4]), slices.Max(rss[n-n/4:])
		r.RSSPeak = slices.Max(rss)
	}
	done, _ := filepath.Glob(filepath.Join(data, "spool", "done", "*gateway-*.arrow"))
	failed, _ := filepath.Glob(filepath.Join(data, "spool", "failed", "*gateway-*"))
	r.RolloutsDone, r.RolloutsFailed = len(done), len(failed)
	b, _ := json.MarshalIndent(r, "", "  ")
	fmt.Println(string(b))
	return os.WriteFile(filepath.Join(out, "gatewayload.json"), append(b, '\n'), 0o644)
}

var servingRe = regexp.MustCompile(`"component":"gateway","listen":"([^"]+)"[^\n]*"message":"gateway serving"`)
var backendRe = regexp.MustCompile(`"backend":"([^"]+)"`)

// waitServing reads the daemon's log until the gateway serves and returns its
// address and, when logged, the backend.
func waitServing(r io.Reader) (addr, backend string, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if m := backendRe.FindStringSubmatch(line); m != nil && backend == "" {
			backend = m[1]
		}
		if m := servingRe.FindStringSubmatch(line); m != nil {
			return m[1], backend, nil
		}
	}
	return "", "", fmt.Errorf("hindsightd exited before the gateway served")
}

func post(client *http.Client, url, session string, body []byte) (map[string]any, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if session != "" {
		req.Header.Set("X-Hindsight-Session", session)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	var v map[string]any
	return v, json.Unmarshal(b, &v)
}

// readRSS returns VmRSS of pid in bytes (0 when unreadable).
func readRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// runLong sends one request of each prompt length in lengths (comma-separated bytes),
// twice, and prints each one's latency and the daemon's CPU seconds meanwhile.
func runLong(base string, pid int, lengths string, maxTokens int, backend string) error {
	client := &http.Client{Timeout: 30 * time.Minute}
	fmt.Printf("backend %s, max_tokens %d\n", backend, maxTokens)
	for _, f := range strings.Split(lengths, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-long: %q is not a length", f)
		}
		for _, run := range []string{"cold", "warm"} {
			// A new text each time: nothing of the first request is reused.
			text := strings.Repeat(fmt.Sprintf("%s request of %d bytes. ", run, n), n)[:n]
			body, _ := json.Marshal(map[string]any{"model": "hindsight", "max_tokens": maxTokens, "seed": 1,
				"messages": []map[string]any{{"role": "user", "content": text}}})
			c0, t0 := cpuSeconds(pid), time.Now()
			v, err := post(client, base+"/chat/completions", "", body)
			if err != nil {
				return err
			}
			took, cpu := time.Since(t0), cpuSeconds(pid)-c0
			u := v["usage"].(map[string]any)
			fmt.Printf("%5d bytes (%s): %.0f prompt tokens, %.0f completion tokens in %.1f s, daemon CPU %.1f s\n",
				n, run, u["prompt_tokens"].(float64), u["completion_tokens"].(float64), took.Seconds(), cpu)
		}
	}
	return nil
}

// cpuSeconds is pid's user + system CPU time (/proc/PID/stat, clock ticks of
// 1/100 s), 0 when unreadable.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name (which may hold spaces) start after ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
