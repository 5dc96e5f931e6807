package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/creditfile"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/internal/testwait"
)

func writeInspectCredit(t *testing.T) string {
	t.Helper()
	ids := tokenizer.NewBytes().EncodeText("héllo")
	T := len(ids)
	r := creditfile.Row{RolloutID: "r-inspect", Tokens: ids, Tokenizer: tokenizer.BytesFingerprint, LossMask: make([]bool, T),
		Student: make([]float32, T), Teacher: make([]float32, T), Advantages: make([]float32, T)}
	for i := range r.Teacher {
		r.Teacher[i] = float32(math.NaN())
	}
	path := filepath.Join(t.TempDir(), "1-x"+creditfile.Suffix)
	require.NoError(t, creditfile.Write(path, []creditfile.Row{r}, true))
	return path
}

func TestInspectWritesHTML(t *testing.T) {
	credit := writeInspectCredit(t)
	out := filepath.Join(t.TempDir(), "credit.html")
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"inspect", "-html", out, credit}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stdout.String(), "1 rollouts")
	page, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(page), `"id":"r-inspect"`)
	require.Contains(t, string(page), `"decoding":"bytes"`)

	// -model decodes with that tokenizer.
	code = run(t.Context(), []string{"inspect", "-model", "bytes", "-html", out, credit}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	page, err = os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(page), `"decoding":"model"`)
	require.Empty(t, stderr.String(), "same fingerprint: no warning")

	// A -model whose tokenizer is not the rollout's: a warning naming the row.
	tokDir := t.TempDir()
	other := append(tokenizer.BytesJSON(), '\n') // the same vocabulary, another file: a sha256 fingerprint
	require.NoError(t, os.WriteFile(filepath.Join(tokDir, "tokenizer.json"), other, 0o644))
	stderr.Reset()
	code = run(t.Context(), []string{"inspect", "-model", tokDir, "-html", out, credit}, &stdout, &stderr)
	require.Equal(t, 0, code, stderr.String())
	require.Contains(t, stderr.String(), `row 0 (rollout_id "r-inspect"): tokenizer bytes-v1`)
}

func TestInspectErrors(t *testing.T) {
	credit := writeInspectCredit(t)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"inspect", credit}, 2, "hindsight inspect: give one of -html OUT and -serve ADDR (hindsight inspect -h lists the flags)\n"},
		{[]string{"inspect", "-html", "x", "-serve", ":0", credit}, 2, "give one of -html OUT and -serve ADDR"},
		{[]string{"inspect", "-html", "x"}, 2, "hindsight inspect: no credit file given"},
		{[]string{"inspect", credit, "-html"}, 2, "hindsight inspect: flag -html needs a value"},
		{[]string{"inspect", credit, "-htm", "x"}, 2, "hindsight inspect: flag provided but not defined: -htm"},
		{[]string{"inspect", "-html", filepath.Join(t.TempDir(), "x"), filepath.Join(t.TempDir(), "missing.arrow")}, 1, "missing.arrow"},
		{[]string{"inspect", "-model", filepath.Join(t.TempDir(), "nodir"), "-html", "x", credit}, 1, "load -model tokenizer"},
	} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, tc.code, run(t.Context(), tc.args, &stdout, &stderr), "%v", tc.args)
		require.Contains(t, stderr.String(), tc.msg, "%v", tc.args)
	}
}

func TestInspectServes(t *testing.T) {
	credit := writeInspectCredit(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout syncBuffer
	var stderr bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"inspect", "-serve", "127.0.0.1:0", credit}, &stdout, &stderr) }()
	re := regexp.MustCompile(`at (http://\S+/)`)
	var url string
	require.Eventually(t, func() bool {
		m := re.FindStringSubmatch(stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, testwait.Guard(time.Minute), 10*time.Millisecond)
	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.Contains(string(body), `"id":"r-inspect"`))
	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, stderr.String())
	case <-time.After(testwait.Guard(time.Minute)):
		t.Fatal("inspect -serve did not stop on cancel")
	}
}
