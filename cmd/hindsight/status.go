package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
	"github.com/hindsight-ai/hindsight/internal/cliflag"
)

// defaultStatusAddr is where hindsightd serves its status unless configured otherwise.
const defaultStatusAddr = "127.0.0.1:7077"

const statusUsage = `usage: hindsight status [-addr HOST:PORT] [-cacert FILE] [-json] [-watch [-interval D]] [-timeout D]

Print the status of a running hindsightd: version, state, spool and ingest counters,
and the last error. Exit 0 on success, 1 if the daemon cannot be reached or reports an
error, 2 on a usage error. With the daemon's status_keys_file, $HINDSIGHT_STATUS_KEY is
sent as the key; with its status TLS, give -addr https://… (and -cacert for a
certificate the system does not trust).

flags:
`

// statusCmd is `hindsight status`: it asks hindsightd's StatusService for a snapshot
// (Connect protocol over HTTP/1.1) and prints it as a table, or as protojson with -json;
// -watch streams snapshots until interrupted.
func statusCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("hindsight status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	daemon := addDaemonFlags(fs)
	asJSON := fs.Bool("json", false, "print protojson instead of a table")
	watch := fs.Bool("watch", false, "keep printing updates until interrupted")
	interval := fs.Duration("interval", time.Second, "time between updates with -watch (at least 100ms)")
	fs.Usage = func() {
		fmt.Fprint(stderr, statusUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	baseURL, ok := daemon.check(fs, stderr)
	if !ok {
		return 2
	}
	if *interval <= 0 {
		fmt.Fprintf(stderr, "hindsight status: -interval must be positive, got %s\n", *interval)
		return 2
	}
	addr, timeout := daemon.addr, daemon.timeout

	printer := printStatusTable
	if *asJSON {
		printer = printStatusJSON
	}
	httpClient, err := daemon.client("HINDSIGHT_STATUS_KEY") // the daemon's status_keys_file
	if err != nil {
		fmt.Fprintf(stderr, "hindsight status: %v\n", err)
		return 2
	}
	client := hindsightv1connect.NewStatusServiceClient(httpClient, baseURL, connect.WithHTTPGet())
	c := statusClient{client: client, addr: *addr, stdout: stdout, stderr: stderr, print: printer}
	if *watch {
		return c.watch(ctx, *interval, *timeout)
	}
	return c.get(ctx, *timeout)
}

// daemonFlags are the flags of the commands that call a running hindsightd.
type daemonFlags struct {
	addr    *string
	timeout *time.Duration
	cacert  *string
}

func addDaemonFlags(fs *flag.FlagSet) daemonFlags {
	return daemonFlags{
		addr:    fs.String("addr", defaultStatusAddr, "hindsightd status `address`, HOST:PORT or an http:// or https:// URL"),
		timeout: fs.Duration("timeout", 5*time.Second, "give up if the daemon has not answered within this `duration`"),
		cacert:  fs.String("cacert", "", "PEM `file` of the certificate (or its CA) an https:// daemon is trusted by, beside the system's"),
	}
}

// client returns the HTTP client for the daemon: trusting -cacert, and sending
// the first of the keyEnvs environment variables that is set as a bearer key.
func (f daemonFlags) client(keyEnvs ...string) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if *f.cacert != "" {
		pem, err := os.ReadFile(*f.cacert)
		if err != nil {
			return nil, fmt.Errorf("read -cacert: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read -cacert %s: no PEM certificate", *f.cacert)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	for _, env := range keyEnvs {
		if key := os.Getenv(env); key != "" {
			rt = bearer{key: key, next: tr}
			break
		}
	}
	return &http.Client{Transport: rt}, nil
}

// check validates the parsed flags and that no argument is left, and returns the
// daemon's base URL; on a usage error it says why on stderr and ok is false.
func (f daemonFlags) check(fs *flag.FlagSet, stderr io.Writer) (baseURL string, ok bool) {
	baseURL, err := statusBaseURL(*f.addr)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
		return "", false
	case fs.NArg() > 0:
		cliflag.Check(fs, stderr, cliflag.NoArgs(fs))
		return "", false
	case *f.timeout <= 0:
		fmt.Fprintf(stderr, "%s: -timeout must be positive, got %s\n", fs.Name(), *f.timeout)
		return "", false
	}
	return baseURL, true
}

// statusBaseURL turns -addr (HOST:PORT, or a URL with a scheme) into a base URL.
func statusBaseURL(addr string) (string, error) {
	raw := addr
	if !strings.Contains(addr, "://") {
		raw = "http://" + addr
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse -addr %q: %w", addr, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("parse -addr %q: scheme must be http or https", addr)
	}
	if u.Host == "" {
		return "", fmt.Errorf("parse -addr %q: no host", addr)
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// statusClient runs one `hindsight status` invocation.
type statusClient struct {
	client hindsightv1connect.StatusServiceClient
	addr   string
	stdout io.Writer
	stderr io.Writer
	print  func(io.Writer, *hindsightv1.Status) error
}

// get prints one snapshot.
func (c statusClient) get(ctx context.Context, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := c.client.GetStatus(ctx, connect.NewRequest(&hindsightv1.GetStatusRequest{}))
	if err != nil {
		return c.fail(err)
	}
	if err := c.print(c.stdout, resp.Msg.GetStatus()); err != nil {
		fmt.Fprintf(c.stderr, "hindsight status: %v\n", err)
		return 1
	}
	return 0
}

// watch prints snapshots as they arrive until ctx is done (exit 0) or the stream breaks
// (exit 1). timeout bounds the wait for the first snapshot only.
func (c statusClient) watch(ctx context.Context, interval, timeout time.Duration) int {
	streamCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(timeout, cancel)
	defer timer.Stop()

	stream, err := c.client.WatchStatus(streamCtx, connect.NewRequest(&hindsightv1.WatchStatusRequest{
		Interval: durationpb.New(interval),
	}))
	if err != nil {
		return c.failWatch(ctx, err)
	}
	defer stream.Close()
	for n := 0; stream.Receive(); n++ {
		timer.Stop()
		if n > 0 {
			fmt.Fprintln(c.stdout)
		}
		if err := c.print(c.stdout, stream.Msg().GetStatus()); err != nil {
			fmt.Fprintf(c.stderr, "hindsight status: %v\n", err)
			return 1
		}
	}
	if err := stream.Err(); err != nil {
		return c.failWatch(ctx, err)
	}
	return 0
}

// failWatch reports why a watch ended; an interrupt (ctx done) is a normal end.
func (c statusClient) failWatch(ctx context.Context, err error) int {
	if ctx.Err() != nil {
		return 0
	}
	if errors.Is(err, context.Canceled) || connect.CodeOf(err) == connect.CodeCanceled {
		// Only the first-snapshot timer cancels the stream's context on its own.
		err = fmt.Errorf("no answer within -timeout: %w", err)
	}
	return c.fail(err)
}

// fail prints err and returns exit code 1. An error the daemon sent is reported as its
// answer; anything else means it could not be reached.
func (c statusClient) fail(err error) int {
	if connect.IsWireError(err) {
		fmt.Fprintf(c.stderr, "hindsight status: hindsightd at %s answered: %v\n", c.addr, err)
	} else {
		fmt.Fprintf(c.stderr, "hindsight status: cannot reach hindsightd at %s: %v\n", c.addr, err)
	}
	return 1
}

// printStatusJSON writes st as indented protojson with every field present.
// protojson's own indentation varies on purpose from build to build; encoding/json
// re-indents it so that the output is stable for scripts and diffs.
func printStatusJSON(w io.Writer, st *hindsightv1.Status) error {
	out, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(st)
	if err != nil {
		return fmt.Errorf("encode status: %w", err)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, out, "", "  "); err != nil {
		return fmt.Errorf("indent status: %w", err)
	}
	buf.WriteByte('\n')
	_, err = buf.WriteTo(w)
	return err
}

// printStatusTable writes st as aligned key/value lines, ingest counters as a
// total / this-process table.
func printStatusTable(w io.Writer, st *hindsightv1.Status) error {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	line := func(key, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", key, fmt.Sprintf(format, args...))
	}
	line("version", "%s", orDash(st.GetVersion()))
	line("state", "%s", stateName(st.GetState()))
	line("started", "%s (up %s)", formatTime(st.GetStartedAt()), st.GetUptime().AsDuration().Round(time.Second))
	line("data dir", "%s", orDash(st.GetDataDir()))
	if sg := st.GetStorage(); sg != nil {
		line("storage", "%s, renames: %s, symlinks: %s", orDash(sg.GetFsType()), orDash(sg.GetRenameMode()), yesNo(sg.GetSymlinks()))
	}
	line("listen addr", "%s", orDash(st.GetListenAddr()))
	sp := st.GetSpool()
	line("spool", "%s incoming, %s processing, %s done, %s failed",
		count(sp.GetIncoming()), count(sp.GetProcessing()), count(sp.GetDone()), count(sp.GetFailed()))
	fmt.Fprintln(tw, "\t") // a blank line that keeps the key column aligned across sections

	total, session := st.GetTotal(), st.GetSession()
	row := func(key string, f func(*hindsightv1.IngestStats) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", key, f(total), f(session))
	}
	fmt.Fprintln(tw, "ingest\ttotal\tthis process")
	row("files claimed", func(s *hindsightv1.IngestStats) string { return count(s.GetFilesClaimed()) })
	row("files done", func(s *hindsightv1.IngestStats) string { return count(s.GetFilesDone()) })
	row("files failed", func(s *hindsightv1.IngestStats) string { return count(s.GetFilesFailed()) })
	row("files quarantined", func(s *hindsightv1.IngestStats) string { return count(s.GetFilesQuarantined()) })
	row("rollouts accepted", func(s *hindsightv1.IngestStats) string { return count(s.GetRolloutsAccepted()) })
	row("rollouts rejected", func(s *hindsightv1.IngestStats) string { return count(s.GetRolloutsRejected()) })
	row("tokens ingested", func(s *hindsightv1.IngestStats) string { return count(s.GetTokensIngested()) })
	row("journal seq", func(s *hindsightv1.IngestStats) string { return strconv.FormatUint(s.GetJournalSeq(), 10) })
	row("rollouts/s", func(s *hindsightv1.IngestStats) string {
		return strconv.FormatFloat(s.GetRolloutsPerSecond(), 'f', 2, 64)
	})
	row("tokens/s", func(s *hindsightv1.IngestStats) string {
		return count(int64(math.Round(s.GetTokensPerSecond())))
	})
	fmt.Fprintln(tw, "\t") // a blank line that keeps the key column aligned across sections

	if tr := st.GetTraining(); tr != nil {
		printTraining(line, st)
		fmt.Fprintln(tw, "\t")
	}
	if len(st.GetEvals()) > 0 {
		printEvals(line, st)
		fmt.Fprintln(tw, "\t")
	}
	if st.GetGateway() != nil || len(st.GetEngineHooks()) > 0 {
		printGateway(line, st)
		fmt.Fprintln(tw, "\t")
	}
	if st.GetPaused() {
		line("paused", "%s", orDash(st.GetPauseReason()))
		if ps := st.GetPause(); ps.GetOperator() {
			line("  since", "%s", formatTime(ps.GetSince()))
		}
		if ps := st.GetPause(); ps.GetDiskFull() {
			line("  disk full", "%s since %s, next try %s", orDash(ps.GetDiskFullOp()),
				formatTime(ps.GetDiskFullSince()), formatTime(ps.GetNextRetryAt()))
		}
	}
	if st.GetLastError() == "" {
		line("last error", "none")
	} else {
		line("last error", "%s", st.GetLastError())
		line("  at", "%s", formatTime(st.GetLastErrorAt()))
		line("  file", "%s", orDash(st.GetLastErrorFile()))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("format status: %w", err)
	}
	var out strings.Builder
	for line := range strings.Lines(buf.String()) {
		out.WriteString(strings.TrimRight(line, " \n"))
		out.WriteByte('\n')
	}
	if _, err := io.WriteString(w, out.String()); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// printGateway writes the gateway's counters and each engine hook's state.
func printGateway(line func(key, format string, args ...any), st *hindsightv1.Status) {
	if g := st.GetGateway(); g != nil {
		line("gateway", "%s serving %q at step %s", orDash(g.GetListenAddr()), g.GetModel(), count(g.GetPolicyStep()))
		line("  requests", "%s (%s errors), %s turns", count(g.GetRequests()), count(g.GetErrors()), count(g.GetTurns()))
		line("  sessions", "%s open, %s recorded as rollouts", count(g.GetOpenSessions()), count(g.GetRolloutsRecorded()))
		line("  feedback window", "%s held (%s bytes), %s written early", count(g.GetHeldSessions()), count(g.GetHeldBytes()),
			count(g.GetHeldWrittenEarly()))
		if n := g.GetCommentsUnusable(); n > 0 {
			line("  comments unusable", "%s", count(n))
		}
		line("  late feedback", "%s joined, %s too late, %s pending", count(g.GetFeedbackJoined()), count(g.GetFeedbackLate()),
			count(g.GetFeedbackPending()))
		if ab := g.GetAb(); ab != nil {
			line("  A/B", "round %d, %s", ab.GetRound(), ab.GetVerdict())
			for _, a := range ab.GetArms() {
				line("    "+a.GetRole(), "step %s: %s sessions, thumbs-up %.3f [%.3f, %.3f] of %s rated, %s outcomes",
					count(a.GetStep()), count(a.GetSessions()), a.GetThumbsUpRate(), a.GetThumbsUpLow(), a.GetThumbsUpHigh(),
					count(a.GetRated()), count(a.GetOutcomes()))
			}
		}
	}
	for _, h := range st.GetEngineHooks() {
		last := "none yet"
		if h.GetLastCheckpoint() != "" {
			last = fmt.Sprintf("step %s at %s", count(h.GetLastStep()), formatTime(h.GetLastPushedAt()))
		}
		line("engine hook", "%s %s: last pushed %s, %s attempts", h.GetKind(), h.GetUrl(), last, count(h.GetAttempts()))
		if h.GetPushing() != "" {
			line("  pushing", "%s", h.GetPushing())
		}
		if h.GetLastError() != "" {
			line("  last error", "%s (at %s)", h.GetLastError(), formatTime(h.GetLastErrorAt()))
		}
	}
}

// printTraining writes the training section: optimizer, rollouts, teacher, credit,
// checkpoint, queues, backend.
func printTraining(line func(key, format string, args ...any), st *hindsightv1.Status) {
	tr := st.GetTraining()
	line("optimizer step", "%s (this process %s), loss %.5g, lr %.3g, grad norm %.3g",
		count(tr.GetStep()), count(tr.GetSessionSteps()), tr.GetLoss(), tr.GetLearningRate(), tr.GetGradNorm())
	terms := fmt.Sprintf("outcome %.5g over %s tokens, distillation %.5g over %s tokens", tr.GetLossOut(), count(tr.GetOutTokens()),
		tr.GetLossDistill(), count(tr.GetDistillTokens()))
	if tr.GradNormOut != nil { // train.term_grad_norms
		terms += fmt.Sprintf("; grad norm outcome %.3g, distillation %.3g", tr.GetGradNormOut(), tr.GetGradNormDistill())
	}
	line("loss terms", "%s", terms)
	if sp := tr.GetStepInProgress(); sp != nil {
		line("step in progress", "%s", stepInProgressLine(sp))
	}
	line("updates", "%s (steps without signal this process: %s)", count(tr.GetUpdates()), count(tr.GetSessionStepsWithoutUpdate()))
	if tr.GetLastStepTook() == nil {
		line("throughput", "no step finished yet (this process)")
	} else {
		line("throughput", "train %s tokens/s, score %s tokens/s, last step %s",
			count(int64(math.Round(tr.GetTrainTokensPerSecond()))), count(int64(math.Round(tr.GetScoreTokensPerSecond()))),
			tr.GetLastStepTook().AsDuration().Round(time.Millisecond))
	}
	line("rollouts", "%s trained, %s skipped (policy lag), %s failed", count(tr.GetRolloutsTrained()),
		count(tr.GetRolloutsSkipped()), count(tr.GetRolloutsFailed()))
	line("batch", "%s rollouts, %s / %s tokens", count(tr.GetBatchRollouts()), count(tr.GetBatchTokens()), count(tr.GetTokenBudget()))
	if ck := st.GetLastCheckpoint(); ck != nil {
		line("checkpoint", "step %s at %s: %s", count(ck.GetStep()), formatTime(ck.GetWrittenAt()), ck.GetPath())
	} else {
		line("checkpoint", "none yet")
	}
	line("credit files", "%s published (this process)", count(tr.GetCreditFiles()))
	if te := st.GetTeacher(); te != nil {
		line("hints", "%s", countsByKey(te.GetHintsBySource()))
		line("teacher failures", "%s", countsByKey(te.GetFailuresByKind()))
		if len(te.GetCommentsDropped()) > 0 {
			line("comments dropped", "%s", countsByKey(te.GetCommentsDropped()))
		}
		line("teacher", "%s rollouts, %s selections, mean %s per rollout, %s requests, %s cache hits%s",
			count(te.GetRollouts()), count(te.GetSelections()), te.GetMeanLatency().AsDuration().Round(time.Microsecond),
			count(te.GetRequests()), count(te.GetCacheHits()), map[bool]string{true: ", breaker " + te.GetBreakerState()}[te.GetBreakerState() != ""])
	}
	if c := st.GetCredit(); c != nil {
		line("credit (last step)", "|Δ| mean %.3g p99 %.3g nats, clip %.1f%%, pivot share %.1f%%, %s hint / %s tokens",
			c.GetDeltaAbsMean(), c.GetDeltaAbsP99(), 100*c.GetClipFraction(), 100*c.GetPivotShare(),
			count(c.GetHintTokens()), count(c.GetTokens()))
	}
	if q := st.GetQueues(); q != nil {
		line("queues", "%s files, %s rollouts in flight, %s files awaiting a checkpoint",
			count(q.GetFiles()), count(q.GetRollouts()), count(q.GetFilesAwaitingCheckpoint()))
	}
	if b := st.GetBackend(); b != nil {
		line("backend", "%s, %s; %s parameters from %s", b.GetName(), b.GetDevice(), count(b.GetParameters()), orDash(b.GetModelDir()))
		if b.GetChoice() != "" {
			line("backend chosen", "%s", b.GetChoice())
		}
		if b.GetMemoryBytes() > 0 {
			line("device memory", "%.1f MiB (%s)", float64(b.GetMemoryBytes())/(1<<20), b.GetMemoryKind())
		}
		if c := b.GetCompile(); c != nil {
			cache := "compiled-program cache off"
			if c.GetCacheDir() != "" {
				cache = fmt.Sprintf("%d loaded from the cache in %s (%d preloaded at start in %s, %d warmed in %s; %s; %d rejected, %d evicted)",
					c.GetProgramsLoaded(), c.GetLoadTime().AsDuration().Round(time.Millisecond),
					c.GetProgramsPreloaded(), c.GetPreloadTime().AsDuration().Round(time.Millisecond),
					c.GetProgramsWarmed(), c.GetWarmTime().AsDuration().Round(time.Millisecond), c.GetCacheDir(),
					c.GetCacheRejected(), c.GetCacheEvicted())
			}
			line("compile", "%d programs compiled in %s; %s", c.GetProgramsCompiled(),
				c.GetCompileTime().AsDuration().Round(time.Millisecond), cache)
		}
	}
}

// printEvals writes one line per eval suite: its latest result and the best so far.
func printEvals(line func(key, format string, args ...any), st *hindsightv1.Status) {
	best := map[string]*hindsightv1.EvalResult{}
	for _, b := range st.GetBestEvals() {
		best[b.GetSuite()] = b
	}
	for _, e := range st.GetEvals() {
		key := "eval " + e.GetSuite()
		if e.GetError() != "" {
			line(key, "step %s failed: %s", count(e.GetStep()), e.GetError())
		} else {
			partial := ""
			if !e.GetComplete() {
				partial = " (budget ran out: partial)"
			}
			line(key, "step %s: %s%s in %.1fs", count(e.GetStep()), formatMetrics(e.GetMetrics(), e.GetPrimary()), partial, e.GetTookSeconds())
		}
		if b := best[e.GetSuite()]; b != nil {
			line("  best", "step %s: %s %.4g (%s)", count(b.GetStep()), b.GetPrimary(), b.GetMetrics()[b.GetPrimary()], orDash(b.GetCheckpoint()))
		}
	}
}

// formatMetrics prints the primary metric first, then the rest sorted by name.
func formatMetrics(m map[string]float64, primary string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != primary {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if _, ok := m[primary]; ok {
		keys = append([]string{primary}, keys...)
	}
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %.4g", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// countsByKey prints a map as "a 3, b 1" sorted by key, or "none".
func countsByKey(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + " " + count(m[k])
	}
	return strings.Join(parts, ", ")
}

// stateName turns STATE_READY into "ready".
func stateName(s hindsightv1.State) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STATE_"))
}

// formatTime prints a timestamp in UTC to the second, or "-" if it is unset.
func formatTime(ts *timestamppb.Timestamp) string {
	if ts == nil {
		return "-"
	}
	return ts.AsTime().UTC().Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// count formats n with thousands separators: 98000000 → "98,000,000".
func count(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// yesNo is "yes" for true and "no" for false.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// stepInProgressLine says where the step on the device is: "step 3, scoring: 12/32
// rollouts scored (240,000/640,000 tokens), 0/32 gradients; 5m12s elapsed, about
// 9m40s left".
func stepInProgressLine(sp *hindsightv1.StepInProgress) string {
	phase := map[string]string{"score": "scoring", "gradient": "gradient passes", "update": "updating the weights"}[sp.GetPhase()]
	if phase == "" {
		phase = sp.GetPhase()
	}
	eta := "time left not known yet"
	if sp.GetEta() != nil {
		eta = "about " + sp.GetEta().AsDuration().Round(time.Second).String() + " left"
	}
	return fmt.Sprintf("step %s, %s: %s/%s rollouts scored (%s/%s tokens), %s/%s gradients (%s/%s tokens); %s elapsed, %s",
		count(sp.GetStep()), phase, count(sp.GetRolloutsScored()), count(sp.GetRollouts()), count(sp.GetTokensScored()), count(sp.GetTokens()),
		count(sp.GetRolloutsGradient()), count(sp.GetRollouts()), count(sp.GetTokensGradient()), count(sp.GetTokens()),
		sp.GetElapsed().AsDuration().Round(time.Second), eta)
}
