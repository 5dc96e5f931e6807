package main

// End-to-end tests: the real hindsightd and hindsight binaries, built once in
// TestMain, run on temp data directories and are killed and signalled for real.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/internal/testwait"
	"github.com/hindsight-ai/hindsight/rollout"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hindsight-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The fsfault and devicefault tags add init functions that read
	// fsutil.FaultEnv and train.StallStepEnv and do nothing without them; building
	// once with them spares CI a second build of both binaries for the tests that
	// refuse RENAME_NOREPLACE at the system call or stall the device.
	build := exec.Command("go", "build", "-tags", "fsfault,devicefault", "-o", dir+"/", "github.com/hindsight-ai/hindsight/cmd/hindsightd", "github.com/hindsight-ai/hindsight/cmd/hindsight")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build binaries:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running hindsightd.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	err    error
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.Write(b)
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stderr.String()
}

// ingestOnly returns the flags of a config with training off: the daemon validates
// and journals, finishing each file as soon as it is decided (the ingest tests).
func ingestOnly(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ingest-only.yaml")
	require.NoError(t, os.WriteFile(path, []byte("train:\n  enabled: false\n"), 0o644))
	return []string{"-config", path}
}

func startDaemon(t *testing.T, args ...string) *proc {
	t.Helper()
	return startDaemonEnv(t, []string{"NOTIFY_SOCKET="}, args...)
}

func startDaemonEnv(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startDaemonBin(t, binDir, env, args...)
}

// startDaemonBin starts the hindsightd of the binary directory bin.
func startDaemonBin(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(bin, "hindsightd"), args...)
	p.cmd.Stderr = p
	p.cmd.Env = append(os.Environ(), env...)
	require.NoError(t, p.cmd.Start())
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the exit code, failing the test if the process has not exited after
// timeout (a hang guard: scaled by testwait, and never under two minutes).
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	guard := testwait.Guard(max(timeout, 2*time.Minute))
	select {
	case <-p.done:
	case <-time.After(guard):
		t.Fatalf("hindsightd did not exit within %s (a hang guard; %s=%g); log:\n%s", guard, testwait.ScaleEnv, testwait.Scale(), p.log())
	}
	return p.cmd.ProcessState.ExitCode()
}

// startConfigured writes a config of data_dir dataDir, listen 127.0.0.1:0 and body
// (the rest of the YAML), starts the real daemon on it with args, and returns the
// daemon once it is ready, with its status address.
func startConfigured(t *testing.T, dataDir, body string, args ...string) (*proc, string) {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "hindsightd.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("data_dir: "+dataDir+"\nlisten: 127.0.0.1:0\n"+body), 0o644))
	p := startDaemon(t, append([]string{"-config", cfg}, args...)...)
	return p, p.waitReady(t)
}

// stop sends SIGTERM and requires a clean exit (code 0) within limit (wait's hang
// guard).
func (p *proc) stop(t *testing.T, limit time.Duration) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, 0, p.wait(t, limit), p.log())
}

var listenRe = regexp.MustCompile(`"listen":"([^"]+)".*"message":"ready"`)

// waitReady waits for the "ready" log line and returns the status address.
func (p *proc) waitReady(t *testing.T) string {
	t.Helper()
	var addr string
	p.waitFor(t, 2*time.Minute, "the ready line", func() bool {
		if m := listenRe.FindStringSubmatch(p.log()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}

// waitFor polls done until it is true, failing the test if the process exits first
// or after the hang guard limit (testwait.Until); what names the awaited event.
func (p *proc) waitFor(t *testing.T, limit time.Duration, what string, done func() bool) {
	t.Helper()
	testwait.Until(t, limit, 20*time.Millisecond, func() string { return what + "; log:\n" + p.log() }, func() bool {
		if done() {
			return true
		}
		select {
		case <-p.done:
			t.Fatalf("hindsightd exited while the test waited for %s: %v\n%s", what, p.err, p.log())
		default:
		}
		return false
	})
}

// waitLog waits until the log holds n lines whose message is msg.
func (p *proc) waitLog(t *testing.T, limit time.Duration, msg string, n int) {
	t.Helper()
	p.waitFor(t, limit, fmt.Sprintf("%d %q lines", n, msg), func() bool { return p.count(msg) >= n })
}

// count is the number of log lines whose message is msg.
func (p *proc) count(msg string) int {
	return strings.Count(p.log(), `"message":`+strconv.Quote(msg))
}

func runCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testwait.Guard(2*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "hindsight"), args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			t.Fatalf("run hindsight %v: %v", args, err)
		}
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// journalEntries reads the journal and checks it ends on a complete line.
func journalEntries(t *testing.T, dataDir string) ([]rollout.Entry, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "state", "journal.jsonl"))
	require.NoError(t, err)
	clean := len(b) == 0 || b[len(b)-1] == '\n'
	var out []rollout.Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e rollout.Entry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			// A compacted journal (≥ rollout.CompactMinFinished files) holds earlier
			// files only in its snapshot; the tests here read raw entries.
			require.NotEqual(t, rollout.OpSnapshot, e.Op, "the journal was compacted; read it with rollout.OpenJournal")
			out = append(out, e)
		}
	}
	return out, clean
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// waitIdle waits until incoming/ and processing/ hold no rollout files.
func waitIdle(t *testing.T, p *proc, spool string) {
	t.Helper()
	p.waitFor(t, 3*time.Minute, "incoming/ and processing/ to empty", func() bool { return spoolEmpty(t, spool) })
}

// spoolEmpty reports whether incoming/ and processing/ hold no rollout files.
func spoolEmpty(t *testing.T, spool string) bool {
	return len(listDir(t, filepath.Join(spool, "incoming"))) == 0 && len(listDir(t, filepath.Join(spool, "processing"))) == 0
}

// stageInputs writes the rollout files of the crash test into dir: good files from the
// real `hindsight synth`, one with bad rows, one truncated, one not Arrow, and a
// re-drop of a good file. It returns the file names and the rollout_ids that must end
// up accepted exactly once.
func stageInputs(t *testing.T, dir string) (names []string, wantAccepted map[string]bool) {
	t.Helper()
	_, stderr, code := runCLI(t, "synth", "-out", dir, "-n", "40", "-tokens", "20000", "-per-file", "2", "-seed", "5", "-prefix", "kill")
	require.Equal(t, 0, code, stderr)
	wantAccepted = map[string]bool{}
	for i := 0; i < 40; i++ {
		wantAccepted[fmt.Sprintf("kill-%06d", i)] = true
	}
	opts := rollout.SynthOptions{Tokens: 3000, Seed: 9, IDPrefix: "bad"}
	bad := []*rollout.Rollout{rollout.Synthesize(opts, 0), rollout.Synthesize(opts, 1), rollout.Synthesize(opts, 2)}
	bad[1].Tokens = append([]int32(nil), bad[1].Tokens...)
	bad[1].Tokens[10] = -4
	wantAccepted["bad-000000"], wantAccepted["bad-000002"] = true, true
	require.NoError(t, rollout.WriteFile(filepath.Join(dir, "badrows.arrow"), bad, rollout.WriteOptions{Format: rollout.FormatStream}))
	b, err := os.ReadFile(filepath.Join(dir, "kill-0003.arrow"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "redrop.arrow"), b, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "truncated.arrow"), b[:len(b)/3], 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notarrow.arrow"), []byte("rollout_id,tokens\nx,1 2 3\n"), 0o644))
	for _, n := range listDir(t, dir) {
		names = append(names, n)
	}
	return names, wantAccepted
}

func TestSIGKILLWhileIngesting(t *testing.T) {
	data := t.TempDir()
	spool := filepath.Join(data, "spool")
	incoming := filepath.Join(spool, "incoming")
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	stage := t.TempDir()
	names, wantAccepted := stageInputs(t, stage)
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })

	const kills = 15
	midFile, openClaims := 0, 0
	args := append(ingestOnly(t), "-data-dir", data, "-listen", "127.0.0.1:0")
	for k := 0; k < kills; k++ {
		// Collectors keep dropping files while the daemon dies and restarts.
		for i := 0; i < 3 && len(names) > 0; i++ {
			require.NoError(t, os.Rename(filepath.Join(stage, names[0]), filepath.Join(incoming, names[0])))
			names = names[1:]
		}
		// Kill at a random moment once it has started to write: between or inside
		// claim, rename, decide, the failed/ companions, move and finish.
		before := fileSize(filepath.Join(data, "state", "journal.jsonl"))
		p := startDaemon(t, args...)
		deadline := time.Now().Add(testwait.Guard(time.Minute))
		for fileSize(filepath.Join(data, "state", "journal.jsonl")) == before && time.Now().Before(deadline) {
			time.Sleep(100 * time.Microsecond)
		}
		time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
		p.wait(t, 10*time.Second)
		if len(listDir(t, filepath.Join(spool, "processing"))) > 0 {
			midFile++
		}
		if entries, _ := journalEntries(t, data); unfinished(entries) > 0 {
			openClaims++
		}
	}
	t.Logf("of %d kills, %d left a file in processing/ and %d an unfinished claim in the journal", kills, midFile, openClaims)
	require.Positive(t, openClaims, "some kill must land in the middle of ingesting, or this test proves nothing")
	for _, n := range names {
		require.NoError(t, os.Rename(filepath.Join(stage, n), filepath.Join(incoming, n)))
	}
	p := startDaemon(t, args...)
	p.waitReady(t)
	waitIdle(t, p, spool)
	p.stop(t, 30*time.Second)

	entries, clean := journalEntries(t, data)
	require.True(t, clean, "journal ends on a complete line after SIGTERM")
	accepted := map[string]int{}
	claimed := map[uint64]string{}
	finished := map[uint64]string{}
	for _, e := range entries {
		switch e.Op {
		case rollout.OpClaim:
			claimed[e.Seq] = e.Name
		case rollout.OpDecide:
			for _, d := range e.Rows {
				if d.Accepted {
					accepted[d.ID]++
				}
			}
		case rollout.OpFinish:
			finished[e.Seq] = e.Outcome
		}
	}
	for id := range wantAccepted {
		require.Equal(t, 1, accepted[id], "rollout %s accepted exactly once", id)
	}
	require.Len(t, accepted, len(wantAccepted), "nothing else accepted")
	require.Equal(t, len(claimed), len(finished), "every claim finished")

	// Every input file ended in done/ or failed/, once; nothing is left or lost.
	require.Empty(t, listDir(t, incoming))
	require.Empty(t, listDir(t, filepath.Join(spool, "processing")))
	outNames := map[string]int{}
	for _, dir := range []string{"done", "failed"} {
		for _, n := range listDir(t, filepath.Join(spool, dir)) {
			if strings.HasSuffix(n, ".error") || strings.HasSuffix(n, ".rejected.arrow") {
				continue
			}
			outNames[n[len("00000000-"):]]++
		}
	}
	staged := map[string]int{}
	for _, n := range listDir(t, stage) {
		staged[n]++
	}
	require.Empty(t, staged, "every staged file was dropped")
	require.Len(t, outNames, 24, "20 synth files + badrows + redrop + truncated + notarrow")
	for n, c := range outNames {
		require.Equal(t, 1, c, "%s claimed once", n)
	}
	require.FileExists(t, filepath.Join(spool, "failed", findClaimed(t, spool, "failed", "truncated.arrow")))
	errText, err := os.ReadFile(filepath.Join(spool, "failed", strings.TrimSuffix(findClaimed(t, spool, "failed", "truncated.arrow"), ".arrow")+".error"))
	require.NoError(t, err)
	require.Contains(t, string(errText), "E_TRUNCATED")
	// Whichever of the two copies was claimed second holds only duplicates.
	require.ElementsMatch(t, []string{rollout.OutcomeDone, rollout.OutcomeFailed},
		[]string{outcomeOf(claimed, finished, "redrop.arrow"), outcomeOf(claimed, finished, "kill-0003.arrow")})
	requireNoTemps(t, data)
}

func unfinished(entries []rollout.Entry) int {
	open := map[uint64]bool{}
	for _, e := range entries {
		switch e.Op {
		case rollout.OpClaim:
			open[e.Seq] = true
		case rollout.OpFinish:
			delete(open, e.Seq)
		}
	}
	return len(open)
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return st.Size()
}

func findClaimed(t *testing.T, spool, dir, name string) string {
	t.Helper()
	for _, n := range listDir(t, filepath.Join(spool, dir)) {
		if strings.HasSuffix(n, "-"+name) {
			return n
		}
	}
	t.Fatalf("%s not in %s/", name, dir)
	return ""
}

func outcomeOf(claimed map[uint64]string, finished map[uint64]string, name string) string {
	for seq, n := range claimed {
		if n == name {
			return finished[seq]
		}
	}
	return ""
}

func TestServeStatusAndDrain(t *testing.T) {
	data := t.TempDir()
	p := startDaemon(t, append(ingestOnly(t), "-data-dir", data, "-listen", "127.0.0.1:0")...)
	addr := p.waitReady(t)

	// A second daemon on the same data directory refuses to start.
	second := startDaemon(t, append(ingestOnly(t), "-data-dir", data, "-listen", "127.0.0.1:0")...)
	require.Equal(t, 1, second.wait(t, 30*time.Second))
	require.Contains(t, second.log(), "another hindsightd")

	// Files dropped while it runs are noticed and ingested, good or bad.
	incoming := filepath.Join(data, "spool", "incoming")
	_, stderr, code := runCLI(t, "synth", "-out", incoming, "-n", "6", "-tokens", "2000", "-prefix", "live")
	require.Equal(t, 0, code, stderr)
	require.NoError(t, os.WriteFile(filepath.Join(incoming, "junk.arrow"), []byte("junk"), 0o644))
	waitIdle(t, p, filepath.Join(data, "spool"))

	var st struct {
		State string `json:"state"`
		Total struct {
			RolloutsAccepted string `json:"rolloutsAccepted"`
			FilesQuarantined string `json:"filesQuarantined"`
		} `json:"total"`
		Spool struct {
			Done   string `json:"done"`
			Failed string `json:"failed"`
		} `json:"spool"`
		LastError string `json:"lastError"`
	}
	p.waitFor(t, time.Minute, "status to count 6 accepted and 1 failed", func() bool {
		out, _, code := runCLI(t, "status", "-addr", addr, "-json")
		return code == 0 && json.Unmarshal([]byte(out), &st) == nil && st.Total.RolloutsAccepted == "6" && st.Spool.Failed == "1"
	})
	require.Equal(t, "STATE_READY", st.State)
	require.Equal(t, "1", st.Total.FilesQuarantined)
	require.Contains(t, st.LastError, "E_NOT_ARROW")

	out, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Contains(t, strings.ToLower(out), "ready")

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	var metrics bytes.Buffer
	metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	require.Contains(t, metrics.String(), `hindsight_rollouts_total{decision="accepted"} 6`)
	require.Contains(t, metrics.String(), `hindsight_files_total{outcome="quarantined"} 1`)
	require.Regexp(t, `hindsight_storage_feature\{feature="rename_noreplace",fs_type="[^"]+"\} [01]`, metrics.String())
	require.Contains(t, p.log(), `"component":"storage"`, "the start-up storage line")

	p.stop(t, 30*time.Second)
	require.Contains(t, p.log(), `"message":"stopped"`)
	_, clean := journalEntries(t, data)
	require.True(t, clean)

	// After it stops, the CLI says it cannot reach it.
	_, stderr, code = runCLI(t, "status", "-addr", addr)
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "cannot reach hindsightd")
}

// TestSystemdNotify runs the daemon as systemd would for Type=notify with a
// watchdog, on a real notify socket.
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(t, err)
	defer conn.Close()
	msgs := make(chan string, 256)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	p := startDaemonEnv(t, []string{"NOTIFY_SOCKET=" + sock, "WATCHDOG_USEC=200000"},
		append(ingestOnly(t), "-data-dir", t.TempDir(), "-listen", "127.0.0.1:0")...)
	var got []string
	next := func(prefix string) {
		t.Helper()
		timeout := time.After(testwait.Guard(time.Minute))
		for {
			for _, line := range got {
				if strings.HasPrefix(line, prefix) {
					return
				}
			}
			select {
			case m := <-msgs:
				got = append(got, strings.Split(m, "\n")...)
			case <-timeout:
				t.Fatalf("no %s from hindsightd; got %q\n%s", prefix, got, p.log())
			}
		}
	}
	next("READY=1")
	next("STATUS=ready")
	next("WATCHDOG=1")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	next("STOPPING=1")
	require.Equal(t, 0, p.wait(t, 30*time.Second))
}

func TestDemo(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(filepath.Join(binDir, "hindsightd"), "-demo")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "summary: 5 files: 4 done, 0 failed (no surviving row), 1 quarantined")
	require.Contains(t, string(out), "E_LOGPROB_NAN")
	require.Len(t, listDir(t, filepath.Join(dir, "hindsight-data", "spool", "done")), 4)
	// A second demo on the same directory adds new rollouts, not duplicates.
	out, err = exec.Command(filepath.Join(binDir, "hindsightd"), "-demo", "-data-dir", filepath.Join(dir, "hindsight-data")).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "13 rollouts accepted")
}

// TestModelDirTokenizer runs the daemon on a model directory made by the real
// `hindsight init-model`: rollouts tokenized by another tokenizer are rejected.
func TestModelDirTokenizer(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "model")
	_, stderr, code := runCLI(t, "init-model", "-out", model, "-preset", "tiny", "-tokenizer", "bytes")
	require.Equal(t, 0, code, stderr)
	cfgPath := filepath.Join(dir, "hindsightd.yaml")
	data := filepath.Join(dir, "data")
	require.NoError(t, os.WriteFile(cfgPath, []byte("data_dir: "+data+"\nlisten: 127.0.0.1:0\nmodel:\n  dir: "+model+"\n"), 0o644))

	incoming := filepath.Join(data, "spool", "incoming")
	opts := rollout.SynthOptions{Tokens: 1000, Seed: 2, IDPrefix: "m"}
	other := rollout.Synthesize(opts, 1)
	other.Tokenizer = "sha256:0000"
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	require.NoError(t, rollout.WriteFile(filepath.Join(incoming, "mixed.arrow"),
		[]*rollout.Rollout{rollout.Synthesize(opts, 0), other}, rollout.WriteOptions{}))

	p := startDaemon(t, "-config", cfgPath)
	p.waitReady(t)
	waitIdle(t, p, filepath.Join(data, "spool"))
	p.stop(t, 30*time.Second)
	errText, err := os.ReadFile(filepath.Join(data, "spool", "failed", "00000001-mixed.error"))
	require.NoError(t, err)
	require.Contains(t, string(errText), `row 1 (rollout_id "m-000001"): column tokenizer: E_TOKENIZER: tokenizer is "sha256:0000", the model's is "bytes-v1"`)

	// A model directory that does not load is one clear start-up error.
	require.NoError(t, os.WriteFile(cfgPath, []byte("data_dir: "+data+"\nmodel:\n  dir: "+filepath.Join(dir, "nope")+"\n"), 0o644))
	p = startDaemon(t, "-config", cfgPath)
	require.Equal(t, 1, p.wait(t, 30*time.Second))
	require.Contains(t, p.log(), "model.dir:")
}

func TestFlagsAndConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("data_dir: x\nspool:\n  rescan_intervall: 1s\n"), 0o644))
	out, err := exec.Command(filepath.Join(binDir, "hindsightd"), "-config", bad).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `bad.yaml: spool.rescan_intervall: unknown key (line 3)`)

	out, err = exec.Command(filepath.Join(binDir, "hindsightd"), "-print-config", "-listen", "0.0.0.0:9999").Output()
	require.NoError(t, err)
	require.Contains(t, string(out), "listen: 0.0.0.0:9999")
	require.Contains(t, string(out), "data_dir: ./hindsight-data")
	// The effective defaults, not the zero values that stand for them.
	require.Contains(t, string(out), "  precision: f32\n")
	require.Contains(t, string(out), "  score_chunk: 512\n")
}

func TestValidateCLI(t *testing.T) {
	dir := t.TempDir()
	opts := rollout.SynthOptions{Tokens: 1000, Seed: 3}
	good := filepath.Join(dir, "good.arrow")
	require.NoError(t, rollout.WriteFile(good, []*rollout.Rollout{rollout.Synthesize(opts, 0)}, rollout.WriteOptions{}))
	r := rollout.Synthesize(opts, 1)
	r.Segments = append([]rollout.Segment(nil), r.Segments...)
	r.Segments[1].Start, r.Segments[1].End = r.Segments[1].End, r.Segments[1].Start
	badPath := filepath.Join(dir, "bad.arrow")
	require.NoError(t, rollout.WriteFile(badPath, []*rollout.Rollout{r}, rollout.WriteOptions{}))

	out, _, code := runCLI(t, "validate", good)
	require.Equal(t, 0, code)
	require.Empty(t, out)
	out, stderr, code := runCLI(t, "validate", good, badPath)
	require.Equal(t, 1, code)
	require.Contains(t, out, badPath+": row 0 (rollout_id \"synth-000001\"): column segments: E_SEG_RANGE")
	require.Contains(t, stderr, "1 of 2 files invalid")
	out, _, code = runCLI(t, "validate", "-vocab", "100", good)
	require.Equal(t, 1, code)
	require.Contains(t, out, "E_TOKEN_RANGE")
	_, _, code = runCLI(t, "validate")
	require.Equal(t, 2, code)
}
