package viewer

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// browser returns the paths of chromium and node, or skips the test without them
// (fails instead when HINDSIGHT_REQUIRE_BROWSER=1, as in CI). HINDSIGHT_CHROMIUM
// names the browser binary when it is not chromium on PATH.
func browser(t *testing.T) (chromium, node string) {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("HINDSIGHT_REQUIRE_BROWSER") == "1" {
			t.Fatalf("%s not found and HINDSIGHT_REQUIRE_BROWSER=1", what)
		}
		t.Skipf("%s not found: apt-get install -y chromium nodejs (or set HINDSIGHT_CHROMIUM)", what)
	}
	chromium = os.Getenv("HINDSIGHT_CHROMIUM")
	if chromium == "" {
		for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
			if p, err := exec.LookPath(name); err == nil {
				chromium = p
				break
			}
		}
	}
	if chromium == "" {
		missing("chromium")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node")
	}
	return chromium, node
}

// nullable returns x, or nil for NaN (JSON null, as the tooltip shows "—").
func nullable(x float32) *float64 {
	if math.IsNaN(float64(x)) {
		return nil
	}
	v := float64(x)
	return &v
}

func writePage(t *testing.T, path string, rows []creditfile.Row) string {
	t.Helper()
	credit := filepath.Join(t.TempDir(), filepath.Base(path)+creditfile.Suffix)
	require.NoError(t, creditfile.Write(credit, rows, true))
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, Write(f, buildFrom(t, nil, credit)))
	return path
}

// longRow is a credit row of n tokens over the byte tokenizer, with a segment and
// a hint every 5,000 tokens.
func longRow(n int) creditfile.Row {
	rng := rand.New(rand.NewPCG(1, 2))
	nan := float32(math.NaN())
	r := creditfile.Row{RolloutID: "long", Tokens: make([]int32, n), LossMask: make([]bool, n), Student: make([]float32, n),
		Teacher: make([]float32, n), Advantages: make([]float32, n), Base: make([]float32, n), Delta: make([]float32, n),
		Rho: make([]float32, n), Sampler: make([]float32, n), Tokenizer: tokenizer.BytesFingerprint}
	text := tokenizer.NewBytes().EncodeText("the quick brown fox jumps over the lazy dog\n")
	for i := range n {
		r.Tokens[i] = text[i%len(text)]
		r.LossMask[i] = i > 0
		r.Student[i] = -rng.Float32() * 3
		r.Teacher[i], r.Base[i], r.Delta[i] = nan, nan, nan
		r.Advantages[i] = rng.Float32()*2 - 1
		r.Rho[i] = 1
		r.Sampler[i] = r.Student[i]
	}
	for s := 0; s < n; s += 5000 {
		r.Segments = append(r.Segments, creditfile.Segment{Start: int32(s), End: int32(min(s+5000, n)), Kind: "assistant"})
		r.Hints = append(r.Hints, creditfile.Hint{Segment: int32(s / 5000), InsertAt: int32(s + 10), End: int32(s + 20),
			Source: "rules", Reason: "surprise", Text: "look again"})
	}
	return r
}

// outcomeRow is a credit row like the demo's: A_t = outcome + Δ_t over a hinted
// span whose Δ_t (−0.019…0.011) is far smaller than the constant outcome term, so
// colouring by A_t paints the span one colour and only Δ_t tells its tokens apart.
func outcomeRow(id string, outcome float32) creditfile.Row {
	nan := float32(math.NaN())
	ids := tokenizer.NewBytes().EncodeText("the answer is 42 because six times seven")
	n := len(ids)
	r := creditfile.Row{RolloutID: id, Tokens: ids, OutcomeAdv: outcome, Tokenizer: tokenizer.BytesFingerprint,
		Segments: []creditfile.Segment{{Start: 0, End: int32(n), Kind: "assistant"}},
		Hints:    []creditfile.Hint{{Segment: 0, InsertAt: 4, End: int32(n), Source: "rules", Reason: "surprise", Text: "check"}}}
	for i := range n {
		d := nan
		if i >= 4 {
			d = -0.019 + 0.03*float32(i-4)/float32(n-5) // −0.019 … 0.011
		}
		a := outcome
		if i >= 4 {
			a += d
		}
		r.LossMask = append(r.LossMask, true)
		r.Student = append(r.Student, -1)
		r.Teacher = append(r.Teacher, nan)
		r.Base = append(r.Base, nan)
		r.Delta = append(r.Delta, d)
		r.Rho = append(r.Rho, 1)
		r.Sampler = append(r.Sampler, -1)
		r.Advantages = append(r.Advantages, a)
	}
	return r
}

// TestViewerInBrowser loads pages in headless Chromium (viewer/testdata/browser/
// check.mjs): hovering tokens shows the file's numbers, arrow keys move focus,
// a header click sorts the list, a 100,000-token rollout keeps a bounded
// number of token nodes wherever it is scrolled, ids with a long common prefix
// stay distinguishable, every rendered token's text has a WCAG contrast of at least
// 4.5 with its background, and colouring by Δ_t tells apart the tokens that A_t
// (dominated by the outcome term) paints alike.
func TestViewerInBrowser(t *testing.T) {
	chromium, node := browser(t)
	if testing.Short() {
		t.Skip("starts a browser")
	}
	dir := t.TempDir()
	_, rows := writeCreditFile(t)
	third := rows[1]
	third.RolloutID, third.Reward, third.HasReward = "roll-3", 2, true
	rows = append(rows, third)
	// Credit schema v3: the hint over tokens 3–5 ("<ok") trained with topk and JSD
	// and kept the teacher's top three at each of them.
	tok := tokenizer.NewBytes()
	h := rows[0].Hints[0]
	h.Context, h.LossMode, h.Divergence, h.JSDAlpha = "sibling+hint", "topk", "jsd", 0.5
	alts := []string{"cat", "dog", "[!]"}
	probs := [][]float64{{0.81, 0.12, 0.05}, {0.6, 0.3, 0.01}, {0.45, 0.4, 0.1}}
	sampledP := []float64{0.02, 0.25, 0.4}
	for i := range 3 {
		ids := tok.EncodeText(string(alts[0][i]) + string(alts[1][i]) + string(alts[2][i]))
		h.TopIDs = append(h.TopIDs, ids)
		h.TopLogProbs = append(h.TopLogProbs, []float32{float32(math.Log(probs[i][0])), float32(math.Log(probs[i][1])), float32(math.Log(probs[i][2]))})
		h.TeacherLogProbs = append(h.TeacherLogProbs, float32(math.Log(sampledP[i])))
	}
	rows[0].Hints = []creditfile.Hint{h}
	var tips []map[string]any
	for i := range 3 {
		t3 := int(h.InsertAt) + i
		sampled := string(rune(rows[0].Tokens[t3])) // the byte tokenizer: id = byte
		tips = append(tips, map[string]any{"rollout": 0, "t": t3, "lines": []string{
			fmt.Sprintf("teacher preferred `%c` %.2f, `%c` %.2f, `%c` %.2f; sampled `%s` %.2f",
				alts[0][i], probs[i][0], alts[1][i], probs[i][1], alts[2][i], probs[i][2], sampled, sampledP[i]),
			"hint 0: context sibling+hint · loss topk, jsd α 0.5"}})
	}
	small := writePage(t, filepath.Join(dir, "small.html"), rows)

	type token struct {
		Rollout int      `json:"rollout"`
		T       int      `json:"t"`
		ID      int32    `json:"id"`
		S       *float64 `json:"s"`
		Q       *float64 `json:"q"`
		Delta   *float64 `json:"delta"`
		Rho     *float64 `json:"rho"`
		A       *float64 `json:"a"`
	}
	var tokens []token
	for _, tt := range []int{1, 4, 5} { // outside the hint, and two hinted tokens (Δ 2 and 3)
		r := rows[0]
		tokens = append(tokens, token{Rollout: 0, T: tt, ID: r.Tokens[tt], S: nullable(r.Student[tt]), Q: nullable(r.Teacher[tt]),
			Delta: nullable(r.Delta[tt]), Rho: nullable(r.Rho[tt]), A: nullable(r.Advantages[tt])})
	}
	const longN = 100_000
	lr := longRow(longN)
	long := writePage(t, filepath.Join(dir, "long.html"), []creditfile.Row{lr})
	// Colours: rollouts whose ids share a 41-character prefix, two like the demo's
	// (A_t dominated by ±0.34) and the small file's first (A_t up to 1.5: dark red).
	const prefix = "demo-2026-12-04T23:41:07Z-worker-07-roll-"
	colourRows := []creditfile.Row{outcomeRow(prefix+"000001", 0.34), outcomeRow(prefix+"000002", -0.34), rows[0]}
	colours := writePage(t, filepath.Join(dir, "colours.html"), colourRows)

	spec := map[string]any{
		"colours": map[string]any{"page": colours, "ids": []string{prefix + "000001", prefix + "000002", rows[0].RolloutID},
			"outcomeRollouts": []int{0, 1}, "minContrast": 4.5},
		"small": small, "tokens": tokens, "teacherTips": tips, "hintRow": "[context sibling+hint · loss topk, jsd α 0.5]", "sortKey": "reward", "sortedIDs": []string{"roll-3", "roll-<1>", "roll-2"},
		"long": long, "longTokens": longN, "longLastID": lr.Tokens[longN-1], "maxTokenNodes": 2500,
	}
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	specPath := filepath.Join(dir, "spec.json")
	require.NoError(t, os.WriteFile(specPath, raw, 0o644))

	cmd := exec.CommandContext(t.Context(), node, filepath.Join("testdata", "browser", "check.mjs"), chromium, specPath)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "browser checks failed")
	require.Contains(t, string(out), "PASS")
}
