package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/gateway/abstat"
)

// abGatewayConfig is the gateway's A/B settings in the tests: half the new
// sessions to the candidate, decided at 5 rated sessions per arm.
const (
	abSeed          = 7
	abShare         = 0.5
	abGatewayConfig = ", reload_interval: 100ms, ab: {enabled: true, share: 0.5, seed: 7, min_sessions: 5, margin: 0.1, confidence: 0.9}"
)

// writeABCheckpoint writes a checkpoint of step under dataDir/checkpoints: the
// files of a fresh tiny model (hindsight init-model -seed seed), so each step
// samples differently; `latest` then names it.
func writeABCheckpoint(t *testing.T, dataDir string, seed, step int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("model-%d", seed))
	_, stderr, code := runCLI(t, "init-model", "-out", dir, "-seed", fmt.Sprint(seed))
	require.Equal(t, 0, code, stderr)
	files := map[string][]byte{}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = b
	}
	ck, err := checkpoint.Write(filepath.Join(dataDir, "checkpoints"), &checkpoint.Contents{Step: step, Files: files,
		State: checkpoint.TrainerState{CreatedAt: time.Now()}}, 0)
	require.NoError(t, err)
	return ck
}

// abSession is one session of an A/B client plan (gateway/testdata/ab_client.py).
type abSession struct {
	ID       string           `json:"id"`
	Turns    int              `json:"turns"`
	Rating   *int             `json:"rating,omitempty"`
	Comment  string           `json:"comment,omitempty"`
	Reward   *float64         `json:"reward,omitempty"`
	Close    bool             `json:"close"`
	Messages []map[string]any `json:"messages,omitempty"`
}

// abResult is what the client got for one session.
type abResult struct {
	Fingerprints []string         `json:"fingerprints"`
	Messages     []map[string]any `json:"messages"`
}

// runABClient runs the openai client on plan and returns its results by session.
func runABClient(t *testing.T, python, base string, p *proc, plan []abSession) map[string]abResult {
	t.Helper()
	dir := t.TempDir()
	pb, err := json.Marshal(map[string]any{"sessions": plan})
	require.NoError(t, err)
	planPath, out := filepath.Join(dir, "plan.json"), filepath.Join(dir, "out.json")
	require.NoError(t, os.WriteFile(planPath, pb, 0o644))
	cmd := exec.CommandContext(t.Context(), python, "../../gateway/testdata/ab_client.py", base, gatewayKey, planPath, out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\ndaemon log:\n%s", b, p.log())
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	got := map[string]abResult{}
	require.NoError(t, json.Unmarshal(raw, &got))
	return got
}

// abIDs returns n session ids (prefix-i) that the assignment sends to the
// candidate (cand true) or to the default: abstat.Unit(seed, id) < share, the
// rule the gateway documents.
func abIDs(prefix string, n int, cand bool) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		if (abstat.Unit(abSeed, id) < abShare) == cand {
			out = append(out, id)
		}
	}
	return out
}

func ip(v int) *int            { return &v }
func fp(v float64) *float64    { return &v }
func stepFP(step int64) string { return fmt.Sprintf("hindsight-step-%d", step) }

// abArms waits until status shows the A/B test with the default at defStep and
// the candidate at candStep (-1: none), and returns it.
func abArms(t *testing.T, p *proc, addr string, defStep, candStep int64) *hindsightv1.ABTest {
	t.Helper()
	var ab *hindsightv1.ABTest
	p.waitFor(t, 3*time.Minute, fmt.Sprintf("A/B default step %d, candidate step %d", defStep, candStep), func() bool {
		ab = statusOf(t, addr).GetGateway().GetAb()
		arms := ab.GetArms()
		if len(arms) == 0 || arms[0].GetStep() != defStep {
			return false
		}
		if candStep < 0 {
			return len(arms) == 1
		}
		return len(arms) == 2 && arms[1].GetStep() == candStep
	})
	return ab
}

// armCounts are what a test expects of one arm in status.
type armCounts struct {
	sessions, turns, rated, up, down, comments, outcomes int64
}

func countsOf(a *hindsightv1.ABArm) armCounts {
	return armCounts{a.GetSessions(), a.GetTurns(), a.GetRated(), a.GetThumbsUp(), a.GetThumbsDown(), a.GetComments(), a.GetOutcomes()}
}

// waitCounts waits until status (published every second or so) shows the
// default's and the candidate's counts, then checks their Wilson bounds and
// latency; it returns the A/B test as status showed it.
func waitCounts(t *testing.T, p *proc, addr string, def, cand armCounts) *hindsightv1.ABTest {
	t.Helper()
	var ab *hindsightv1.ABTest
	p.waitFor(t, 2*time.Minute, fmt.Sprintf("A/B counts default %+v, candidate %+v", def, cand), func() bool {
		ab = statusOf(t, addr).GetGateway().GetAb()
		return len(ab.GetArms()) == 2 && countsOf(ab.GetArms()[0]) == def && countsOf(ab.GetArms()[1]) == cand
	})
	requireArm(t, ab.GetArms()[0], def)
	requireArm(t, ab.GetArms()[1], cand)
	return ab
}

func requireArm(t *testing.T, a *hindsightv1.ABArm, want armCounts) {
	t.Helper()
	require.Equal(t, want, countsOf(a), "arm %s (step %d)", a.GetRole(), a.GetStep())
	w := abstat.Wilson(want.up, want.rated, 0.9)
	require.InDelta(t, w.Low, a.GetThumbsUpLow(), 1e-12)
	require.InDelta(t, w.High, a.GetThumbsUpHigh(), 1e-12)
	if want.turns > 0 {
		require.Positive(t, a.GetLatencyMeanSeconds())
	}
}

// TestGatewayAB serves two checkpoints by share to the official openai client:
// each session's answers all come from the checkpoint its id is assigned
// (abstat.Unit(seed, id) < share: the candidate), across a SIGKILL and restart
// too; the per-arm counts in status equal what the client sent, and survive the
// restart; the rule promotes a candidate rated better and rolls back one rated
// worse, each decision logged with its numbers and in decisions.jsonl; every
// rollout's policy_version is the step of the checkpoint that sampled it; and
// `hindsight ab` shows the test and promotes and rolls back by hand.
func TestGatewayAB(t *testing.T) {
	python := pythonWith(t, "openai")
	dataDir := t.TempDir()
	p, base := startGatewayWith(t, dataDir, "train: {enabled: false}\n", abGatewayConfig)
	addr := p.waitReady(t)
	abArms(t, p, addr, 0, -1) // the initial model is the default; no candidate yet
	writeABCheckpoint(t, dataDir, 3, 5)
	abArms(t, p, addr, 0, 5)

	// Round 2: three sessions per arm, rated and closed, and one candidate session
	// left open.
	cand, def := abIDs("r2", 6, true), abIDs("r2", 5, false)
	var plan []abSession
	for i := range 3 {
		plan = append(plan,
			abSession{ID: cand[i], Turns: 2, Rating: ip(1), Comment: "good", Reward: fp(1), Close: true},
			abSession{ID: def[i], Turns: 2, Rating: ip(-1), Reward: fp(0), Close: true})
	}
	plan = append(plan, abSession{ID: cand[3], Turns: 1})
	got := runABClient(t, python, base, p, plan)
	steps := map[string]int64{} // the step that served each session
	for _, id := range cand[:4] {
		steps[id] = 5
	}
	for _, id := range def[:3] {
		steps[id] = 0
	}
	for id, r := range got {
		for _, f := range r.Fingerprints {
			require.Equal(t, stepFP(steps[id]), f, "session %s: every answer from its arm's checkpoint", id)
		}
	}
	defWant, candWant := armCounts{sessions: 3, turns: 6, rated: 3, down: 3, outcomes: 3}, armCounts{sessions: 4, turns: 7, rated: 3, up: 3, comments: 3, outcomes: 3}
	ab := waitCounts(t, p, addr, defWant, candWant)
	require.Equal(t, int64(2), ab.GetRound())
	require.Contains(t, ab.GetVerdict(), "collecting")

	// SIGKILL mid-test: the counts are durable, and the open session goes on with
	// its checkpoint after the restart.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	p.wait(t, time.Minute)
	p, base = startGatewayWith(t, dataDir, "train: {enabled: false}\n", abGatewayConfig)
	addr = p.waitReady(t)
	ab = waitCounts(t, p, addr, defWant, candWant)
	require.Equal(t, int64(2), ab.GetRound())

	// The open session, two more per arm: the default's fifth rating, sent last,
	// completes min_sessions and the rule promotes the candidate.
	plan = []abSession{{ID: cand[3], Turns: 1, Rating: ip(1), Close: true, Messages: got[cand[3]].Messages}}
	plan = append(plan, abSession{ID: cand[4], Turns: 1, Rating: ip(1), Close: true}, abSession{ID: cand[5], Turns: 1, Rating: ip(1), Close: true},
		abSession{ID: def[3], Turns: 1, Rating: ip(-1), Close: true}, abSession{ID: def[4], Turns: 1, Rating: ip(-1), Close: true})
	got2 := runABClient(t, python, base, p, plan)
	steps[cand[4]], steps[cand[5]], steps[def[3]], steps[def[4]] = 5, 5, 0, 0
	for id, r := range got2 {
		for _, f := range r.Fingerprints {
			require.Equal(t, stepFP(steps[id]), f, "session %s: every answer from its arm's checkpoint (after the restart too)", id)
		}
	}
	ab = abArms(t, p, addr, 5, -1)
	require.Equal(t, int64(1), ab.GetPromotions())
	d := ab.GetDecisions()[len(ab.GetDecisions())-1]
	require.Equal(t, "promote", d.GetAction())
	require.Equal(t, "rule", d.GetBy())
	require.Equal(t, int64(5), d.GetDefaultN())
	require.Equal(t, int64(6), d.GetCandidateN())
	require.Equal(t, 0.0, d.GetDefaultEst())
	require.Equal(t, 1.0, d.GetCandidateEst())
	want := abstat.Newcombe(6, 6, 0, 5, 0.9)
	require.InDelta(t, want.Low, d.GetDiffLow(), 1e-12)
	require.Greater(t, d.GetDiffLow(), -0.1)
	p.waitLog(t, time.Minute, "A/B decision", 1)

	// Round 4: a newer checkpoint is the candidate; rated worse, it is rolled back,
	// and the default (step 5) keeps serving new sessions.
	writeABCheckpoint(t, dataDir, 4, 9)
	abArms(t, p, addr, 5, 9)
	cand, def = abIDs("r4", 5, true), abIDs("r4", 5, false)
	plan = nil
	for i := range 5 {
		plan = append(plan, abSession{ID: cand[i], Turns: 1, Rating: ip(-1), Close: true}, abSession{ID: def[i], Turns: 1, Rating: ip(1), Close: true})
		steps[cand[i]], steps[def[i]] = 9, 5
	}
	got3 := runABClient(t, python, base, p, plan)
	for id, r := range got3 {
		for _, f := range r.Fingerprints {
			require.Equal(t, stepFP(steps[id]), f, "session %s", id)
		}
	}
	ab = abArms(t, p, addr, 5, -1)
	require.Equal(t, int64(1), ab.GetRollbacks())
	d = ab.GetDecisions()[len(ab.GetDecisions())-1]
	require.Equal(t, "rollback", d.GetAction())
	require.Equal(t, int64(9), d.GetCandidateStep())
	require.Less(t, d.GetDiffHigh(), -0.1)
	after := runABClient(t, python, base, p, []abSession{{ID: "after-rollback", Turns: 1, Close: true}})
	require.Equal(t, []string{stepFP(5)}, after["after-rollback"].Fingerprints, "step 9 is not tried again")
	steps["after-rollback"] = 5

	// The history: both decisions with their numbers, one fsynced line each.
	f, err := os.Open(filepath.Join(dataDir, "state", "ab", "decisions.jsonl"))
	require.NoError(t, err)
	var hist []gateway.Decision
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d gateway.Decision
		require.NoError(t, json.Unmarshal(sc.Bytes(), &d))
		hist = append(hist, d)
	}
	f.Close()
	require.Len(t, hist, 2)
	require.Equal(t, []string{"promote", "rollback"}, []string{hist[0].Action, hist[1].Action})
	require.Equal(t, int64(6), hist[0].CandN)

	// Every rollout names the checkpoint that sampled it.
	ros := doneRollouts(t, dataDir, len(steps))
	for id, step := range steps {
		require.NotNil(t, ros[id], "session %s has a rollout", id)
		require.Equal(t, step, ros[id].PolicyVersion, "session %s", id)
	}

	// By hand: a candidate, promoted; another, rolled back.
	writeABCheckpoint(t, dataDir, 5, 12)
	abArms(t, p, addr, 5, 12)
	out, stderr, code := runCLI(t, "ab", "status", "-addr", addr)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "candidate")
	require.Contains(t, out, "step 12")
	out, stderr, code = runCLI(t, "ab", "promote", "-addr", addr, "-reason", "reviewed the transcripts")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "promote")
	abArms(t, p, addr, 12, -1)
	writeABCheckpoint(t, dataDir, 6, 15)
	abArms(t, p, addr, 12, 15)
	_, stderr, code = runCLI(t, "ab", "rollback", "-addr", addr)
	require.Equal(t, 0, code, stderr)
	ab = abArms(t, p, addr, 12, -1)
	d = ab.GetDecisions()[len(ab.GetDecisions())-1]
	require.Equal(t, "rollback", d.GetAction())
	require.NotEqual(t, "rule", d.GetBy())
	_, stderr, code = runCLI(t, "ab", "rollback", "-addr", addr)
	require.Equal(t, 1, code, "no candidate: refused")
	require.Contains(t, stderr, "no candidate")
	require.True(t, strings.Contains(p.log(), `"by":"rule"`))
}

// TestGatewayABUpstream runs the A/B test on an engine (gateway/testdata/fake_vllm.py,
// which answers in vLLM's shapes and loads LoRA adapters by name): the vllm_lora
// engine hook loads the candidate as the adapter served-policy-step-5 before it
// serves a session; the requests of the candidate's sessions name it and the
// default's name served-policy; after a promotion new sessions name the promoted
// adapter, and a session of the old default keeps its name and its checkpoint.
func TestGatewayABUpstream(t *testing.T) {
	engine, engineLog := startFakeVLLM(t)
	dataDir := t.TempDir()
	top := fmt.Sprintf("train: {enabled: false}\nengine_hooks: [{kind: vllm_lora, url: %s, lora_name: served-policy, attempts: 2}]\n",
		strings.TrimSuffix(engine, "/v1"))
	p, base := startGatewayWith(t, dataDir, top, ", upstream: "+engine+", upstream_model: served-policy"+abGatewayConfig)
	addr := p.waitReady(t)
	abArms(t, p, addr, 0, -1)
	ck := writeABCheckpoint(t, dataDir, 3, 5)
	ab := abArms(t, p, addr, 0, 5)
	require.Equal(t, "served-policy", ab.GetArms()[0].GetModel())
	require.Equal(t, "served-policy-step-5", ab.GetArms()[1].GetModel())

	type logged struct {
		Model     string `json:"model"`
		LoRAName  string `json:"lora_name"`
		LoRAPath  string `json:"lora_path"`
		MaxTokens int    `json:"max_tokens"`
	}
	readLog := func() []logged {
		b, err := os.ReadFile(engineLog)
		require.NoError(t, err)
		var out []logged
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var l logged
			require.NoError(t, json.Unmarshal([]byte(line), &l))
			out = append(out, l)
		}
		return out
	}
	abs, err := filepath.Abs(ck)
	require.NoError(t, err)
	require.Equal(t, []logged{{LoRAName: "served-policy-step-5", LoRAPath: abs}}, readLog(), "the candidate is loaded on the engine before any request")
	hooks := statusOf(t, addr).GetEngineHooks()
	require.Len(t, hooks, 1)
	require.Equal(t, abs, hooks[0].GetLastCheckpoint(), "the hook's state shows the load")
	require.Equal(t, int64(5), hooks[0].GetLastStep())

	turn := func(id string, msgs []map[string]any) (string, map[string]any) {
		body, _ := json.Marshal(map[string]any{"model": "hindsight", "messages": msgs, "max_tokens": 16})
		status, v := post(t, base+"/chat/completions", gatewayKey, id, string(body))
		require.Equal(t, 200, status, v)
		return v["system_fingerprint"].(string), v["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	}
	cand, def := abIDs("up", 2, true), abIDs("up", 2, false)
	want := []string{}
	first := []map[string]any{{"role": "user", "content": "hello"}}
	var oldDefault map[string]any
	for i, id := range []string{cand[0], def[0], cand[1], def[1]} {
		fp, msg := turn(id, first)
		if i%2 == 0 {
			require.Equal(t, stepFP(5), fp, "session %s", id)
			want = append(want, "served-policy-step-5")
		} else {
			require.Equal(t, stepFP(0), fp, "session %s", id)
			want = append(want, "served-policy")
			oldDefault = msg
		}
	}
	var got []string
	for _, l := range readLog()[1:] {
		got = append(got, l.Model)
	}
	require.Equal(t, want, got, "each request names its session's arm")

	_, stderr, code := runCLI(t, "ab", "promote", "-addr", addr)
	require.Equal(t, 0, code, stderr)
	ab = abArms(t, p, addr, 5, -1)
	require.Equal(t, "served-policy-step-5", ab.GetArms()[0].GetModel(), "the promoted checkpoint keeps its name")
	fp, _ := turn("after-promote", first)
	require.Equal(t, stepFP(5), fp)
	fp, _ = turn(def[1], append(append(first[:1:1], oldDefault), map[string]any{"role": "user", "content": "more"}))
	require.Equal(t, stepFP(0), fp, "a session of the old default keeps its checkpoint")
	reqs := readLog()
	require.Len(t, reqs, 7, "no adapter reloaded for the promotion")
	require.Equal(t, "served-policy-step-5", reqs[5].Model)
	require.Equal(t, "served-policy", reqs[6].Model)
	require.NotContains(t, p.log(), `"level":"error"`)
}
