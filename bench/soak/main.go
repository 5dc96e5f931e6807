// Command soak is hindsightd's soak benchmark (not run in CI): it builds the real
// binaries, starts hindsightd with training on (tiny model, pure-Go backend) on a temp
// data directory, feeds it -n synthetic rollouts plus about 5% malformed files
// (truncated, not Arrow, rows that fail validation), samples the daemon's RSS every
// second from /proc/PID/status, waits until every file is in done/ or failed/, sends
// SIGTERM and reports throughput, peak RSS, RSS in the first and last quarter of the
// run, and the fate of every file. It prints a summary and writes soak.json.
//
//	go run ./bench/soak -n 1000 -tokens 256 -out /tmp/soak
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/rollout"
)

type rssSample struct {
	T   float64 `json:"t_s"`
	RSS int64   `json:"rss_bytes"`
}

type report struct {
	Rollouts         int         `json:"rollouts"`
	TokensPerRollout int         `json:"tokens_flag"`
	MaxTokens        int         `json:"max_tokens"`
	FilesGood        int         `json:"files_good"`
	FilesMalformed   int         `json:"files_malformed"`
	FilesDone        int         `json:"files_done"`
	FilesFailed      int         `json:"files_failed"`
	FilesMissing     []string    `json:"files_missing"`
	Seconds          float64     `json:"seconds"`
	RolloutsTrained  int64       `json:"rollouts_trained"`
	RolloutsRejected int64       `json:"rollouts_rejected"`
	RolloutsFailed   int64       `json:"rollouts_failed"`
	TokensIngested   int64       `json:"tokens_ingested"`
	Steps            int64       `json:"steps"`
	RolloutsPerSec   float64     `json:"rollouts_per_second"`
	TokensPerSec     float64     `json:"tokens_per_second"`
	PeakRSS          int64       `json:"peak_rss_bytes"`
	FirstQuarterRSS  int64       `json:"first_quarter_mean_rss_bytes"`
	LastQuarterRSS   int64       `json:"last_quarter_mean_rss_bytes"`
	ExitCode         int         `json:"exit_code"`
	StopSeconds      float64     `json:"stop_seconds"`
	RSS              []rssSample `json:"rss"`
}

func main() {
	n := flag.Int("n", 1000, "good rollouts to feed")
	tokens := flag.Int("tokens", 256, "tokens per rollout at most (synthetic rollouts are cut to this)")
	perFile := flag.Int("per-file", 4, "rollouts per good file")
	budget := flag.Int("budget", 4096, "train.token_budget")
	out := flag.String("out", "", "work directory (default: a new temp dir); soak.json and hindsightd.log go here")
	timeout := flag.Duration("timeout", 40*time.Minute, "give up after this long")
	flag.Parse()
	if err := run(*n, *tokens, *perFile, *budget, *out, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(n, tokens, perFile, budget int, work string, timeout time.Duration) error {
	var err error
	if work == "" {
		if work, err = os.MkdirTemp("", "hindsight-soak-"); err != nil {
			return err
		}
	}
	bin, data, stage := filepath.Join(work, "bin"), filepath.Join(work, "data"), filepath.Join(work, "stage")
	for _, d := range []string{bin, stage} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	fmt.Println("building binaries")
	build := exec.Command("go", "build", "-o", bin+"/", "github.com/hindsight-ai/hindsight/cmd/hindsightd", "github.com/hindsight-ai/hindsight/cmd/hindsight")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("build: %w", err)
	}

	// Inputs, staged before the daemon starts so that writing them is not timed.
	fmt.Println("synthesizing inputs")
	good, err := synth(stage, n, tokens, perFile)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	maxTokens, err := maxLen(good)
	if err != nil {
		return err
	}
	bad, err := malformed(stage, good, max(1, int(math.Round(0.05*float64(len(good))))))
	if err != nil {
		return err
	}
	files := append(append([]string{}, good...), bad...)
	slices.Sort(files)

	port, err := freePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cfgPath := filepath.Join(work, "soak.yaml")
	cfg := fmt.Sprintf("data_dir: %s\nlisten: %s\nlog:\n  format: json\ntrain:\n  token_budget: %d\n  idle_flush: 2s\n  checkpoint:\n    every_steps: 10\n    keep: 2\n", data, addr, budget)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(work, "hindsightd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	d := exec.Command(filepath.Join(bin, "hindsightd"), "-config", cfgPath)
	d.Stdout, d.Stderr = logf, logf
	d.Env = append(os.Environ(), "NOTIFY_SOCKET=", "GOMLX_NO_AUTO_INSTALL=1")
	if err := d.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- d.Wait() }()
	defer d.Process.Kill()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	fmt.Println("waiting for hindsightd on", addr)
	for {
		if st, err := status(bin, addr); err == nil && st.GetState() == hindsightv1.State_STATE_READY {
			break
		}
		select {
		case err := <-exited:
			return fmt.Errorf("hindsightd exited before ready: %v (see %s)", err, logf.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}

	// Feed like collectors: a few files at a time, renamed into incoming/.
	rep := report{Rollouts: n, TokensPerRollout: tokens, MaxTokens: maxTokens, FilesGood: len(good), FilesMalformed: len(bad)}
	start := time.Now()
	incoming := filepath.Join(data, "spool", "incoming")
	go func() {
		for i, f := range files {
			os.Rename(f, filepath.Join(incoming, filepath.Base(f)))
			if i%10 == 9 {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()

	fmt.Printf("fed %d files (%d good with %d rollouts, %d malformed); sampling RSS every second\n", len(files), len(good), n, len(bad))
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last *hindsightv1.Status
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("hindsightd exited during the run: %v (see %s)", err, logf.Name())
		case <-ctx.Done():
			return fmt.Errorf("not finished after %s: %w", timeout, ctx.Err())
		case <-tick.C:
		}
		if rss, err := vmRSS(d.Process.Pid); err == nil {
			rep.RSS = append(rep.RSS, rssSample{time.Since(start).Seconds(), rss})
		}
		done, failed, missing := accounted(data, files)
		if st, err := status(bin, addr); err == nil {
			last = st
			if len(rep.RSS)%10 == 0 {
				fmt.Printf("%4.0fs: %d done, %d failed, step %d, %d trained, rss %.0f MiB\n", time.Since(start).Seconds(), done, failed,
					st.GetTraining().GetStep(), st.GetTraining().GetRolloutsTrained(), float64(rep.RSS[len(rep.RSS)-1].RSS)/(1<<20))
			}
		}
		if len(missing) == 0 {
			rep.FilesDone, rep.FilesFailed = done, failed
			break
		}
	}
	rep.Seconds = time.Since(start).Seconds()
	if st, err := status(bin, addr); err == nil {
		last = st
	}
	tr := last.GetTraining()
	rep.RolloutsTrained, rep.RolloutsFailed, rep.Steps = tr.GetRolloutsTrained(), tr.GetRolloutsFailed(), tr.GetStep()
	rep.RolloutsRejected, rep.TokensIngested = last.GetTotal().GetRolloutsRejected(), last.GetTotal().GetTokensIngested()
	rep.RolloutsPerSec = float64(rep.RolloutsTrained) / rep.Seconds
	rep.TokensPerSec = float64(rep.TokensIngested) / rep.Seconds

	stop := time.Now()
	d.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		rep.ExitCode = exitCode(err)
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("hindsightd did not stop within 2m of SIGTERM")
	}
	rep.StopSeconds = time.Since(stop).Seconds()
	_, _, rep.FilesMissing = accounted(data, files)
	summarizeRSS(&rep)

	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(filepath.Join(work, "soak.json"), b, 0o644); err != nil {
		return err
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf(`
soak: %d rollouts (≤ %d tokens) in %d files + %d malformed files, %.0f s
  throughput   %.2f rollouts/s, %.0f tokens/s (%d steps of %d tokens)
  rollouts     %d trained, %d rejected, %d failed
  files        %d done, %d failed, %d not accounted for
  RSS          peak %.0f MiB; mean %.0f MiB in the first quarter, %.0f MiB in the last
  SIGTERM      exit %d after %.1f s
  details      %s
`, n, rep.MaxTokens, len(good), len(bad), rep.Seconds, rep.RolloutsPerSec, rep.TokensPerSec, rep.Steps, budget,
		rep.RolloutsTrained, rep.RolloutsRejected, rep.RolloutsFailed, rep.FilesDone, rep.FilesFailed, len(rep.FilesMissing),
		mib(rep.PeakRSS), mib(rep.FirstQuarterRSS), mib(rep.LastQuarterRSS), rep.ExitCode, rep.StopSeconds, filepath.Join(work, "soak.json"))
	if len(rep.FilesMissing) > 0 || rep.ExitCode != 0 {
		return fmt.Errorf("%d files not accounted for, exit %d", len(rep.FilesMissing), rep.ExitCode)
	}
	return nil
}

// synth writes n rollouts as hindsight synth does (rollout.Synthesize, the same
// generator), cut to at most maxTokens tokens each (synth's own minimum is about 400),
// perFile to a file.
func synth(dir string, n, maxTokens, perFile int) ([]string, error) {
	opts := rollout.SynthOptions{N: n, Tokens: 256, Seed: 11, IDPrefix: "soak"}
	var paths []string
	for f := 0; f*perFile < n; f++ {
		var rs []*rollout.Rollout
		for i := f * perFile; i < min(n, (f+1)*perFile); i++ {
			rs = append(rs, truncate(rollout.Synthesize(opts, i), maxTokens))
		}
		p := filepath.Join(dir, fmt.Sprintf("soak-%04d.arrow", f))
		if err := rollout.WriteFile(p, rs, rollout.WriteOptions{}); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// truncate keeps r's last n tokens, where the tool calls and the answer (the
// trainable tokens) are, dropping the segments before the cut and shortening the one
// across it.
func truncate(r *rollout.Rollout, n int) *rollout.Rollout {
	cut := len(r.Tokens) - n
	if cut <= 0 {
		return r
	}
	valid := make([]byte, (n+7)/8)
	for i := range n {
		if r.LogProbValid(i + cut) {
			valid[i/8] |= 1 << (i % 8)
		}
	}
	r.Tokens, r.LogProbs = r.Tokens[cut:], r.LogProbs[cut:]
	r.SetLogProbValidity(valid, 0)
	var segs []rollout.Segment
	for _, s := range r.Segments {
		if int(s.End) <= cut {
			continue
		}
		s.Start, s.End = max(s.Start-int32(cut), 0), s.End-int32(cut)
		segs = append(segs, s)
	}
	r.Segments = segs
	return r
}

// malformed writes k broken files beside the good ones, in turn: truncated copies
// of a good file, files that are not Arrow, and files whose rows fail validation
// (a negative token id, a duplicate rollout_id) beside one good row.
func malformed(dir string, good []string, k int) ([]string, error) {
	var out []string
	for i := range k {
		path := filepath.Join(dir, fmt.Sprintf("bad-%03d.arrow", i))
		switch i % 3 {
		case 0:
			b, err := os.ReadFile(good[i%len(good)])
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
				return nil, err
			}
		case 1:
			if err := os.WriteFile(path, []byte("this is not an Arrow file\n"), 0o644); err != nil {
				return nil, err
			}
		case 2:
			opts := rollout.SynthOptions{N: 3, Tokens: 256, Seed: uint64(100 + i), IDPrefix: fmt.Sprintf("badrow%03d", i)}
			rs := []*rollout.Rollout{rollout.Synthesize(opts, 0), rollout.Synthesize(opts, 1), rollout.Synthesize(opts, 2)}
			rs[1].Tokens[3] = -1     // E_TOKEN_RANGE
			rs[2].ID = "soak-000000" // duplicate of a good rollout: E_DUP_ROLLOUT (or its file's)
			if err := rollout.WriteFile(path, rs, rollout.WriteOptions{}); err != nil {
				return nil, err
			}
		}
		out = append(out, path)
	}
	return out, nil
}

// maxLen is the longest rollout in files, in tokens.
func maxLen(files []string) (int, error) {
	m := 0
	for _, f := range files {
		r, err := rollout.OpenReader(f, rollout.ReadOptions{})
		if err != nil {
			return 0, err
		}
		for r.Next() {
			m = max(m, len(r.Rollout().Tokens))
		}
		err = r.Err()
		r.Close()
		if err != nil {
			return 0, err
		}
	}
	return m, nil
}

// accounted counts fed files that reached done/ or failed/ (as <seq>-name) and
// lists those that did not.
func accounted(data string, files []string) (done, failed int, missing []string) {
	in := func(dir string) map[string]bool {
		m := map[string]bool{}
		ents, _ := os.ReadDir(filepath.Join(data, "spool", dir))
		for _, e := range ents {
			name := e.Name()
			if i := strings.IndexByte(name, '-'); i > 0 && strings.HasSuffix(name, ".arrow") && !strings.HasSuffix(name, rollout.RejectedSuffix) {
				m[name[i+1:]] = true
			}
		}
		return m
	}
	dm, fm := in(rollout.DirDone), in(rollout.DirFailed)
	for _, f := range files {
		b := filepath.Base(f)
		switch {
		case dm[b]:
			done++
		case fm[b]:
			failed++
		default:
			missing = append(missing, b)
		}
	}
	return done, failed, missing
}

func status(bin, addr string) (*hindsightv1.Status, error) {
	out, err := exec.Command(filepath.Join(bin, "hindsight"), "status", "-json", "-addr", addr, "-timeout", "3s").Output()
	if err != nil {
		return nil, err
	}
	st := &hindsightv1.Status{}
	return st, protojson.Unmarshal(out, st)
}

func vmRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

func summarizeRSS(rep *report) {
	s := rep.RSS
	if len(s) == 0 {
		return
	}
	mean := func(xs []rssSample) int64 {
		if len(xs) == 0 {
			return 0
		}
		var t int64
		for _, x := range xs {
			t += x.RSS
		}
		return t / int64(len(xs))
	}
	for _, x := range s {
		rep.PeakRSS = max(rep.PeakRSS, x.RSS)
	}
	q := max(1, len(s)/4)
	rep.FirstQuarterRSS, rep.LastQuarterRSS = mean(s[:q]), mean(s[len(s)-q:])
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// rs0ID is the rollout_id of the first row of a good file.
func rs0ID(path string) string {
	r, err := rollout.OpenReader(path, rollout.ReadOptions{})
	if err != nil {
		return "soak-missing"
	}
	defer r.Close()
	if r.Next() {
		return r.Rollout().ID
	}
	return "soak-missing"
}
