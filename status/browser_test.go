package status_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/stretchr/testify/require"
)

// chromiumPath returns the browser binary, or skips the test without one (fails
// instead when HINDSIGHT_REQUIRE_BROWSER=1, as in CI). HINDSIGHT_CHROMIUM names it
// when it is not chromium on PATH.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HINDSIGHT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("HINDSIGHT_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium not found and HINDSIGHT_REQUIRE_BROWSER=1")
	}
	t.Skip("chromium not found: apt-get install -y chromium (or set HINDSIGHT_CHROMIUM)")
	return ""
}

// TestStatusPageInBrowser loads / from the real server in headless Chromium, lets
// its script fetch /status/history.json, and checks the rendered DOM: the state, a
// chart per series with its SVG polyline, the eval chart and the credit file link.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := chromiumPath(t)
	if testing.Short() {
		t.Skip("starts a browser")
	}
	dir := t.TempDir()
	name := "3-run" + creditfile.Suffix
	writeTestCredit(t, dir, name, "hi")
	base := startPagesServer(t, dir)

	profile := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
		"--no-first-run", "--no-default-browser-check", "--user-data-dir="+filepath.Join(profile, "p"),
		"--virtual-time-budget=5000", "--dump-dom", base+"/")
	out, err := cmd.Output()
	require.NoError(t, err, "chromium --dump-dom")
	dom := string(out)
	require.Contains(t, dom, `<span id="state">ready</span>`)
	require.Regexp(t, `uptime 1h 30m 0s;`, dom, "uptime in whole seconds, not protojson's 12.345678s")
	line := regexp.MustCompile(`<polyline [^>]*class="line series"[^>]*points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+"`)
	require.Contains(t, dom, "loss 1.5 (outcome 1 over 640 tokens, distillation 0.5 over 48 tokens; gradient norms 2, 0.75)")
	require.Contains(t, dom, `<p id="progress">step 4 in progress, scoring: 12/32 rollouts scored (240,000/640,000 tokens), `+
		`0/32 gradients (0/640,000 tokens); 5m 12s elapsed, about 9m 40s left</p>`, "the step on the device")
	for _, id := range []string{"loss", "tps", "clip", "pivot", "latency", "errors", "queue", "termgrad", "evals"} {
		at := strings.Index(dom, `id="chart-`+id+`"`)
		require.GreaterOrEqual(t, at, 0, "chart %s rendered", id)
		card := dom[at:]
		card = card[:strings.Index(card, "</svg>")]
		require.Regexp(t, line, card, "chart %s draws its two points", id)
	}
	require.Contains(t, dom, "; lifetime: accepted ", "totals say whose they are")
	require.Contains(t, dom, " trained (in the weights)")
	require.NotContains(t, dom, "1e-9", "no axis of a billionth")
	loss := dom[strings.Index(dom, `id="chart-loss"`):]
	require.Contains(t, loss[:strings.Index(loss, "</svg>")], "distillation term 0.5", "the loss chart has the two terms")
	require.Contains(t, dom, `href="/viewer/`+name+`"`)
	require.Contains(t, dom, "smoke")
	require.Contains(t, dom, "<td>127.0.0.1:7078</td><td>hindsight</td><td>3</td><td>41</td><td>2</td><td>39</td><td>5</td><td>11</td><td>6</td><td>1</td><td>0</td>",
		"the gateway's counters")
	require.Contains(t, dom, "<td>default</td><td>3</td><td></td><td>30</td><td>60</td><td>0.25</td><td>20</td><td>16</td><td>2</td><td>2</td>"+
		"<td>0.8 [0.58, 0.92]</td><td>4</td><td>10</td><td>0.5 [0.25, 0.75]</td>", "the A/B test's default arm")
	require.Contains(t, dom, "<td>candidate</td><td>9</td><td></td><td>10</td><td>12</td><td>0.5</td><td>10</td><td>6</td><td>0</td><td>4</td>"+
		"<td>0.6 [0.31, 0.83]</td><td>0</td><td>0</td><td>–</td>", "the A/B test's candidate arm")
	require.Contains(t, dom, "candidate − default -0.2 [-0.4, -0.1]; the candidate is worse by more than the margin — the candidate is LOSING; 1 promoted, 2 rolled back")
	require.Regexp(t, `<td>promote</td><td>rule</td><td>1</td><td>3</td><td>0.1 \[-0.02, 0.2\]</td><td>not worse</td>`, dom)
	require.Regexp(t, `<td>sglang</td><td>http://127.0.0.1:30000</td><td>step 3 at [^<]+</td><td>2</td><td></td><td></td>`, dom)
	require.Contains(t, dom, "<td>vllm_lora</td><td>http://127.0.0.1:8000</td><td>none yet</td><td>4</td><td></td><td>503 Service Unavailable</td>")
}
