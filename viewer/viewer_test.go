package viewer

import (
	"bytes"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
)

// writeCreditFile writes a v2 credit file of two rollouts over the byte tokenizer
// and returns its path and rows.
func writeCreditFile(t *testing.T) (string, []creditfile.Row) {
	t.Helper()
	nan := float32(math.NaN())
	tok := tokenizer.NewBytes()
	ids := tok.EncodeText("ls\n<ok> done")
	T := len(ids)
	row := creditfile.Row{RolloutID: "roll-<1>", TaskID: "task-a", Tokens: ids, Step: 5, PolicyVersion: 4, TeacherVersion: 4,
		Reward: 1, HasReward: true, OutcomeAdv: 0.5, Tokenizer: tokenizer.BytesFingerprint,
		Segments: []creditfile.Segment{{Start: 0, End: 3, Kind: "tool_call", Tool: "shell", Status: "error"},
			{Start: 3, End: int32(T), Kind: "assistant"}},
		Hints: []creditfile.Hint{{Segment: 1, InsertAt: 3, End: 6, Source: "rules", Reason: "tool_error", Text: "read </script> the error", Tokens: []int32{1, 2}}}}
	for i := range T {
		trained := i > 0
		row.LossMask = append(row.LossMask, trained)
		row.Student = append(row.Student, -float32(i)/4)
		row.Advantages = append(row.Advantages, 0.5)
		row.Teacher = append(row.Teacher, nan)
		row.Base = append(row.Base, nan)
		row.Delta = append(row.Delta, nan)
		row.Rho = append(row.Rho, 1)
		row.Sampler = append(row.Sampler, -float32(i)/4-0.125)
	}
	for i := 3; i < 6; i++ {
		row.Teacher[i] = row.Student[i] + float32(i-2)
		row.Base[i], row.Delta[i] = row.Student[i], float32(i-2) // Δ = 1, 2, 3: clip 2 clips two of three
		row.Advantages[i] = 0.5 + 0.5*min(float32(i-2), 2)
	}
	other := creditfile.Row{RolloutID: "roll-2", Tokens: []int32{7, 8}, LossMask: []bool{false, true},
		Student: []float32{0, -1}, Teacher: []float32{nan, nan}, Advantages: []float32{0, -0.25}, OutcomeAdv: -0.25}
	path := filepath.Join(t.TempDir(), "1-a"+creditfile.Suffix)
	require.NoError(t, creditfile.Write(path, []creditfile.Row{row, other}, true))
	return path, []creditfile.Row{row, other}
}

func buildFrom(t *testing.T, tok tokenizer.Tokenizer, paths ...string) *Page {
	t.Helper()
	var rows [][]creditfile.Row
	for _, p := range paths {
		r, err := creditfile.Read(p)
		require.NoError(t, err)
		rows = append(rows, r)
	}
	p, err := Build(paths, rows, tok, 2)
	require.NoError(t, err)
	return p
}

// pageData extracts the JSON embedded in a page.
func pageData(t *testing.T, html string) map[string]any {
	t.Helper()
	m := regexp.MustCompile(`(?s)<script type="application/json" id="credit-data">(.*?)</script>`).FindStringSubmatch(html)
	require.NotNil(t, m, "page holds the data script")
	var v map[string]any
	require.NoError(t, json.Unmarshal([]byte(m[1]), &v))
	return v
}

func TestPageHoldsTheCreditFile(t *testing.T) {
	path, rows := writeCreditFile(t)
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, buildFrom(t, nil, path)))
	html := buf.String()

	require.NotContains(t, html, "/*DATA*/")
	require.NotContains(t, html, "/*JS*/")
	require.Contains(t, html, "window.hindsightViewer", "the script is inlined")
	require.Equal(t, 2, strings.Count(html, "</script>"), "hint text cannot close the data script")
	for _, u := range regexp.MustCompile(`(?i)(?:src|href)\s*=\s*["']?([^"' >]+)`).FindAllStringSubmatch(html, -1) {
		t.Errorf("page loads %q: it must be self-contained", u[1])
	}
	require.NotRegexp(t, `https?://[^w]`, html, "no network: the only URL is the SVG namespace")

	v := pageData(t, html)
	rs := v["rollouts"].([]any)
	require.Len(t, rs, 2)
	r := rs[0].(map[string]any)
	require.Equal(t, "roll-<1>", r["id"])
	require.Equal(t, DecodeBytes, r["decoding"])
	text := ""
	for _, s := range r["text"].([]any) {
		text += s.(string)
	}
	require.Equal(t, "ls\n<ok> done", text, "the byte tokenizer decodes bytes-v1 rollouts")
	for _, col := range []struct {
		name string
		want []float32
	}{{"s", rows[0].Student}, {"q", rows[0].Teacher}, {"delta", rows[0].Delta}, {"rho", rows[0].Rho},
		{"a", rows[0].Advantages}, {"base", rows[0].Base}, {"mu", rows[0].Sampler}} {
		got := r[col.name].([]any)
		require.Len(t, got, len(col.want), col.name)
		for i, w := range col.want {
			if math.IsNaN(float64(w)) {
				require.Nil(t, got[i], "%s[%d]: NaN is null", col.name, i)
			} else {
				require.InDelta(t, w, got[i], 1e-6, "%s[%d]", col.name, i)
			}
		}
	}
	require.InDelta(t, 6, r["sum_abs_delta"], 1e-6)
	require.InDelta(t, 2.0/3, r["clip_fraction"], 1e-6)
	require.EqualValues(t, 1, r["reward"])
	seg := r["segments"].([]any)[0].(map[string]any)
	require.Equal(t, "shell", seg["Tool"])
	require.Equal(t, "error", seg["Status"])
	h := r["hints"].([]any)[0].(map[string]any)
	require.EqualValues(t, 3, h["insert_at"])
	require.Equal(t, "rules", h["source"])
	require.Equal(t, "read </script> the error", h["text"])

	r2 := rs[1].(map[string]any)
	require.Nil(t, r2["reward"])
	require.Equal(t, DecodeIDs, r2["decoding"], "no tokenizer fingerprint and no -model: ids")
	require.Equal(t, []any{"7 ", "8 "}, r2["text"])
	require.EqualValues(t, 0, r2["clip_fraction"])
	require.InDelta(t, 0.25, r2["credit_mass"], 1e-6)
}

func TestPageReadsSchemaV1(t *testing.T) {
	p := buildFrom(t, tokenizer.NewBytes(), filepath.Join("..", "data", "creditfile", "testdata", "credit_v1.arrow"))
	require.Len(t, p.Rollouts, 2)
	r := p.Rollouts[0]
	require.False(t, r.SchemaV2)
	require.Equal(t, DecodeModel, r.Decoding)
	require.Equal(t, "Hi!\n", strings.Join(r.Text, ""))
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, p))
	got := pageData(t, buf.String())["rollouts"].([]any)[0].(map[string]any)
	require.Nil(t, got["delta"], "a v1 file has no Δ column")
}

// TestPageShowsTheTeachersView: from a credit schema v3 file (the creditfile golden
// file), each hinted token carries the teacher's probability of the sampled token
// and its top alternatives, decoded, most likely first; each hint its context kind
// and loss mode. Where two hints cover a token, the first one's teacher is shown.
func TestPageShowsTheTeachersView(t *testing.T) {
	golden := filepath.Join("..", "data", "creditfile", "testdata", "credit_v3.arrow")
	p := buildFrom(t, nil, golden)
	r := p.Rollouts[0]
	require.Len(t, r.TeacherViews, len(r.IDs))
	require.Nil(t, r.TeacherViews[0], "outside the hint")
	v := r.TeacherViews[1]
	require.Equal(t, 0, v.Hint)
	require.InDelta(t, math.Exp(-0.5), float64(v.Sampled), 1e-6)
	require.Equal(t, []int32{99, 105, 97}, v.IDs)
	require.Equal(t, []string{"c", "i", "a"}, v.Text)
	require.InDeltaSlice(t, []float64{math.Exp(-0.2), math.Exp(-0.5), math.Exp(-3)}, []float64{float64(v.P[0]), float64(v.P[1]), float64(v.P[2])}, 1e-6)
	require.Equal(t, []string{"!", ".", "?"}, r.TeacherViews[2].Text)
	require.Nil(t, r.TeacherViews[3], "the span ends at 3")
	h := r.Hints[0]
	require.Equal(t, "sibling+feedback+hint", h.Context)
	require.Equal(t, "topk", h.LossMode)
	require.Equal(t, "jsd", h.Divergence)
	require.EqualValues(t, 0.5, h.JSDAlpha)

	sampled := p.Rollouts[1].TeacherViews[1]
	require.Empty(t, sampled.IDs, "mode sampled_token keeps no alternatives")
	require.InDelta(t, math.Exp(-2), float64(sampled.Sampled), 1e-6)
	require.Nil(t, p.Rollouts[2].TeacherViews, "a row without hints has none")

	rows, err := creditfile.Read(golden)
	require.NoError(t, err)
	second := rows[0].Hints[0]
	second.InsertAt, second.End = 2, 4
	second.TeacherLogProbs, second.TopIDs, second.TopLogProbs = []float32{-1, -1}, [][]int32{{65}, {66}}, [][]float32{{-1}, {-1}}
	rows[0].Hints = append(rows[0].Hints, second)
	p, err = Build([]string{golden}, [][]creditfile.Row{rows}, nil, 2)
	require.NoError(t, err)
	views := p.Rollouts[0].TeacherViews
	require.Equal(t, 0, views[2].Hint, "overlap: the first hint's teacher")
	require.Equal(t, 1, views[3].Hint)
	require.Equal(t, []string{"B"}, views[3].Text)

	plain, _ := writeCreditFile(t) // hints without the v3 fields, as a v2 file's read back
	var buf bytes.Buffer
	require.NoError(t, Write(&buf, buildFrom(t, nil, plain)))
	got := pageData(t, buf.String())["rollouts"].([]any)[0].(map[string]any)
	require.NotContains(t, got, "teacher", "no teacher views in the page")
}

func TestHandlerServesThePage(t *testing.T) {
	path, _ := writeCreditFile(t)
	h, err := Handler(buildFrom(t, nil, path))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/")
	require.NoError(t, err)
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Equal(t, "roll-<1>", pageData(t, body.String())["rollouts"].([]any)[0].(map[string]any)["id"])

	resp, err = http.Get(srv.URL + "/other")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, err = http.Post(srv.URL+"/", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestBuildNamesTheBadToken(t *testing.T) {
	path, _ := writeCreditFile(t)
	rows, err := creditfile.Read(path)
	require.NoError(t, err)
	rows[0].Tokens[2] = 1 << 20
	_, err = Build([]string{path}, [][]creditfile.Row{rows}, nil, 2)
	require.ErrorContains(t, err, path+" row 0: decode token 2")
}

// BenchmarkPage100k builds and writes the page of one 100,000-token rollout (the
// Go side of loading it: the browser side is measured by hand, see docs/teacher-and-credit.md "Credit viewer").
func BenchmarkPage100k(b *testing.B) {
	rows := [][]creditfile.Row{{longRow(100_000)}}
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		p, err := Build([]string{"long.credit.arrow"}, rows, nil, 2)
		if err != nil {
			b.Fatal(err)
		}
		if err := Write(&buf, p); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "page_bytes")
}

// TestTokenTextsJoinsMultiByteCharacters checks that the bytes of one UTF-8
// character are shown as the character on its first byte, not one U+FFFD per byte,
// while a U+FFFD in the text itself stays one per byte.
func TestTokenTextsJoinsMultiByteCharacters(t *testing.T) {
	tok := tokenizer.NewBytes()
	ids := tok.Encode("né→\uFFFDx")
	got, err := tokenTexts(tok, ids)
	require.NoError(t, err)
	require.Equal(t, []string{"n", "é", "", "→", "", "", "\uFFFD", "\uFFFD", "\uFFFD", "x"}, got)
}
