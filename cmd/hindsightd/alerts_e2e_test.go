package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
)

// alertRulesPath is the alerting rules file deploy/ ships (docs/running.md "Alerts").
const alertRulesPath = "../../deploy/prometheus/hindsight-alerts.yml"

// alertRule is one rule of a Prometheus rules file, as far as these tests read it.
type alertRule struct {
	Alert  string            `yaml:"alert"`
	Expr   string            `yaml:"expr"`
	Labels map[string]string `yaml:"labels"`
}

func readAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(alertRulesPath)
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal(b, &f))
	var rules []alertRule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	return rules
}

var (
	promqlString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promqlGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promqlIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	promqlKeywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true}
)

// promqlMetricNames returns the metric names a PromQL expression reads: its
// identifiers less strings, label matchers, ranges, grouping clauses, function
// calls and keywords.
func promqlMetricNames(expr string) []string {
	expr = promqlString.ReplaceAllString(expr, `""`)
	expr = promqlMatchers.ReplaceAllString(expr, " ")
	expr = promqlGrouping.ReplaceAllString(expr, " ")
	seen := map[string]bool{}
	for _, loc := range promqlIdent.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsRune("0123456789.", rune(expr[loc[0]-1])) {
			continue // an exponent or a number's tail (1e9, 0x1f)
		}
		if strings.HasPrefix(strings.TrimLeft(expr[loc[1]:], " \t\n"), "(") || promqlKeywords[name] {
			continue // a function call or a keyword
		}
		seen[name] = true
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestPromQLMetricNames(t *testing.T) {
	got := promqlMetricNames(`(
	    sum by (instance, job) (rate(hindsight_teacher_failures_total[15m]))
	  / on (instance, job) group_left(suite) hindsight_x{dir="a b",path=~"/srv/.*"} offset 5m
	) > 0.20 * 1e9 and bool time() - process_start_time_seconds unless up{job='hindsight'} == 1
	or max(hindsight_y) or sum by(job)(hindsight_z)`)
	require.Equal(t, []string{"hindsight_teacher_failures_total", "hindsight_x", "hindsight_y", "hindsight_z",
		"process_start_time_seconds", "up"}, got)
}

// scrapeNames returns the metric names in a Prometheus text exposition (the
// names of its samples, _total included).
func scrapeNames(t *testing.T, body string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	require.NoError(t, sc.Err())
	return names
}

// scrapeValues returns each sample of a Prometheus text exposition by its name and
// labels as written (name{a="x",b="y"}).
func scrapeValues(t *testing.T, body string) map[string]float64 {
	t.Helper()
	vals := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if m := sampleLine.FindStringSubmatch(line); m != nil {
			v, err := strconv.ParseFloat(m[3], 64)
			require.NoError(t, err, line)
			vals[m[1]+m[2]] = v
		}
	}
	return vals
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestAlertRuleMetrics runs the real daemon with training, an eval suite whose
// score falls with every checkpoint and the gateway's A/B test, scrapes its /metrics, and fails on any metric the
// alerting rules read that the daemon does not export, so the rules cannot drift from
// the code. Then the scraped series themselves, held for 40 minutes, go through
// `promtool test rules`: the eval regression alert fires on the daemon's own labels
// and values, and no other alert does.
func TestAlertRuleMetrics(t *testing.T) {
	rules := readAlertRules(t)
	require.NotEmpty(t, rules)
	used := map[string][]string{} // metric → the alerts that read it
	for _, r := range rules {
		require.NotEmpty(t, r.Alert)
		require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "alert %s", r.Alert)
		for _, n := range promqlMetricNames(r.Expr) {
			used[n] = append(used[n], r.Alert)
		}
	}
	require.GreaterOrEqual(t, len(used), 10, "metric names found in the rules: %v", used)
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("the rules read %d metrics: %s", len(names), strings.Join(names, " "))

	dataDir := t.TempDir()
	incoming := filepath.Join(dataDir, "spool", "incoming")
	require.NoError(t, os.MkdirAll(incoming, 0o755))
	synthInto(t, incoming, 4, 2)
	p, addr := startConfigured(t, dataDir, `train:
  token_budget: 256
  idle_flush: 500ms
  seed: 7
  optimizer: {lr: 0.001, warmup_steps: 1}
  checkpoint: {every_steps: 1, keep: 5}
gateway: {enabled: true, listen: "127.0.0.1:0", ab: {enabled: true}}
eval:
  budget: 0
  suites:
    - {name: falling, kind: command, command: ["sh", "-c", "echo \"{\\\"score\\\": -$HINDSIGHT_STEP}\""]}
`)

	// Wait for an eval of a checkpoint after the best one (step 1 scores -1, the best).
	var st *hindsightv1.Status
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st = statusOf(t, addr)
		if len(st.GetEvals()) == 1 && st.GetEvals()[0].GetStep() >= 2 && len(st.GetBestEvals()) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no eval of step 2 in time; status evals %v\n%s", st.GetEvals(), p.log())
		}
		select {
		case <-p.done:
			t.Fatalf("hindsightd exited: %v\n%s", p.err, p.log())
		case <-time.After(300 * time.Millisecond):
		}
	}
	require.EqualValues(t, 1, st.GetBestEvals()[0].GetStep())
	body := scrape(t, addr)
	exported := scrapeNames(t, body)
	var missing []string
	for n, alerts := range used {
		if !exported[n] {
			missing = append(missing, fmt.Sprintf("%s (read by %s)", n, strings.Join(alerts, ", ")))
		}
	}
	sort.Strings(missing)
	require.Empty(t, missing, "the alerting rules read metrics the daemon does not export")

	// The series added for the rules carry the status's values.
	values := scrapeValues(t, body)
	step := int64(values[`hindsight_eval_step{suite="falling"}`]) // a later eval may have come since st
	require.GreaterOrEqual(t, step, int64(2))
	require.Equal(t, float64(-step), values[`hindsight_eval_primary{suite="falling"}`])
	require.Equal(t, -1.0, values[`hindsight_eval_best_primary{suite="falling"}`])
	require.Equal(t, 1.0, values[`hindsight_eval_best_step{suite="falling"}`])
	require.Equal(t, 0.0, values[`hindsight_paused{cause="operator"}`])
	require.Equal(t, 0.0, values[`hindsight_paused{cause="disk_full"}`])
	require.Equal(t, 0.0, values["hindsight_gateway_ab_candidate_losing"], "no A/B data yet: not losing")
	require.Equal(t, 0.0, values[`hindsight_gateway_ab_decisions_total{action="rollback"}`])
	progress := values["hindsight_train_progress_timestamp_seconds"]
	require.GreaterOrEqual(t, progress, float64(st.GetTraining().GetLastStepAt().AsTime().Unix()))
	require.LessOrEqual(t, progress, float64(time.Now().Unix()+1))
	absData, err := filepath.Abs(dataDir)
	require.NoError(t, err)
	avail, size := values[fmt.Sprintf(`hindsight_disk_available_bytes{path=%q}`, absData)], values[fmt.Sprintf(`hindsight_disk_size_bytes{path=%q}`, absData)]
	require.Positive(t, size, "no disk series for the data directory in\n%s", body)
	require.LessOrEqual(t, avail, size)
	_, stderr, code := runCLI(t, "pause", "-addr", addr, "-reason", "alerts test")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, 1.0, scrapeValues(t, scrape(t, addr))[`hindsight_paused{cause="operator"}`])

	p.stop(t, 60*time.Second)

	promtool := promtoolPath(t)
	if promtool == "" {
		return
	}
	runPromtoolOnScrape(t, promtool, body, used, fmt.Sprintf(`
      - eval_time: 40m
        alertname: HindsightEvalRegression
        exp_alerts:
          - exp_labels: {severity: warning, instance: daemon, job: hindsight, suite: falling}
            exp_annotations:
              summary: "hindsight on daemon: eval falling regressed by %d against the best checkpoint"
              description: "The latest checkpoint's primary metric on falling is below the best one's by more than 5%%. evals.jsonl has every checkpoint's results; `+"`hindsight status`"+` shows latest and best."`, step-1))
}

// promtoolPath finds promtool (Debian's prometheus package); without it the test
// skips the promtool part, or fails under HINDSIGHT_REQUIRE_PROMTOOL=1 (CI).
func promtoolPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err == nil {
		return p
	}
	if os.Getenv("HINDSIGHT_REQUIRE_PROMTOOL") == "1" {
		t.Fatal("promtool not found and HINDSIGHT_REQUIRE_PROMTOOL=1 (apt-get install prometheus)")
	}
	t.Log("promtool not found: the rules are not run on the scraped series (apt-get install prometheus)")
	return ""
}

var sampleLine = regexp.MustCompile(`^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// runPromtoolOnScrape writes a promtool unit test whose input is every sample of the
// scraped metrics the rules read, held constant for 40 minutes under
// instance="daemon", job="hindsight", and runs it with the given alert_rule_test
// entries plus one "no alert" entry at 40m for each other alert.
func runPromtoolOnScrape(t *testing.T, promtool, body string, used map[string][]string, expect string) {
	t.Helper()
	var series strings.Builder
	n := 0
	for _, line := range strings.Split(body, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil || used[m[1]] == nil {
			continue
		}
		labels := strings.TrimSuffix(strings.TrimPrefix(m[2], "{"), "}")
		if labels != "" {
			labels += ","
		}
		labels += `instance="daemon",job="hindsight"`
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		fmt.Fprintf(&series, "      - series: '%s{%s}'\n        values: '%sx40'\n", m[1], labels, strconv.FormatFloat(v, 'f', -1, 64))
		n++
	}
	require.Positive(t, n)
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`alertname: (\w+)`).FindAllStringSubmatch(expect, -1) {
		named[m[1]] = true
	}
	var quiet strings.Builder
	for _, r := range readAlertRules(t) {
		// Whether the test machine's disk is nearly full is not the daemon's doing.
		if !named[r.Alert] && r.Alert != "HindsightDiskNearlyFull" {
			fmt.Fprintf(&quiet, "      - eval_time: 40m\n        alertname: %s\n        exp_alerts: []\n", r.Alert)
		}
	}
	dir := t.TempDir()
	rules, err := filepath.Abs(alertRulesPath)
	require.NoError(t, err)
	test := fmt.Sprintf("rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n%s    alert_rule_test:\n%s%s\n",
		rules, series.String(), quiet.String(), expect)
	path := filepath.Join(dir, "scraped_test.yml")
	require.NoError(t, os.WriteFile(path, []byte(test), 0o644))
	out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput()
	require.NoError(t, err, "promtool test rules on the scraped series:\n%s\n%s", out, test)
}

// TestAlertRulesPromtool runs `promtool check rules` and the rules' unit tests
// (deploy/prometheus/hindsight-alerts_test.yml), as .ci/run does.
func TestAlertRulesPromtool(t *testing.T) {
	promtool := promtoolPath(t)
	if promtool == "" {
		t.Skip("no promtool")
	}
	out, err := exec.Command(promtool, "check", "rules", alertRulesPath).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(promtool, "test", "rules", "../../deploy/prometheus/hindsight-alerts_test.yml").CombinedOutput()
	require.NoError(t, err, "%s", out)
}
