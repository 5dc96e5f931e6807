package main

import (
	"bytes"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data/creditfile"
)

// TestDistillTopKCreditFiles runs the daemon with credit.distill.mode topk (k 8,
// JSD, topk_ids union: the student's top 8 and the teacher's, so the teacher's most
// likely id is among the kept ones and the ranking below can be checked) and
// train.term_grad_norms on synthetic rollouts, and checks what a run
// records of the teacher's view: each hint of the credit files (schema v3) says its
// context kind and loss, carries the teacher's log-prob of every sampled token of its
// span and its top 5 alternatives there, ranked, consistent with that log-prob (an
// off-by-one between the kept distributions and the span would break it); and the
// step's two loss terms and their gradient norms reach status and /metrics.
func TestDistillTopKCreditFiles(t *testing.T) {
	dataDir, cfg := spoolWithRollouts(t, 4, 2, "  token_budget: 256\n  idle_flush: 500ms\n  term_grad_norms: true\n  seed: 7\n"+
		"  optimizer:\n    lr: 0.001\n    warmup_steps: 1\n  checkpoint:\n    every_steps: 1\n    keep: 1\n"+
		"credit:\n  normalize: separate\n  distill:\n    mode: topk\n    top_k: 8\n    divergence: jsd\n    topk_ids: union\n")
	p := startDaemon(t, "-config", cfg)
	addr := p.waitReady(t)
	st := waitTrained(t, p, addr, 4)
	tr := st.GetTraining()
	require.Positive(t, tr.GetDistillTokens(), "a hinted span was trained")
	require.Positive(t, tr.GetOutTokens())
	require.NotNil(t, tr.GradNormOut, "train.term_grad_norms reports the terms' norms")
	require.False(t, math.IsNaN(tr.GetGradNormDistill()))
	out, _, code := runCLI(t, "status", "-addr", addr)
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^loss terms +outcome \S+ over [0-9,]+ tokens, distillation \S+ over [0-9,]+ tokens; grad norm outcome \S+, distillation \S+$`, out)
	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	var metrics bytes.Buffer
	_, err = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, metrics.String(), `hindsight_train_term_grad_norm{term="distill"}`)
	require.Contains(t, metrics.String(), `hindsight_train_term_tokens{term="distill"}`)
	p.stop(t, 60*time.Second)

	hints, inTop := 0, 0
	for _, n := range listDir(t, filepath.Join(dataDir, "outputs")) {
		rows, err := creditfile.Read(filepath.Join(dataDir, "outputs", n))
		require.NoError(t, err)
		for _, r := range rows {
			for k, h := range r.Hints {
				hints++
				span := int(h.End - h.InsertAt)
				require.NotEmpty(t, h.Context, "%s hint %d", r.RolloutID, k)
				require.Equal(t, "topk", h.LossMode)
				require.Equal(t, "jsd", h.Divergence)
				require.EqualValues(t, 0.5, h.JSDAlpha)
				require.Len(t, h.TeacherLogProbs, span)
				require.Len(t, h.TopIDs, span)
				for i := range span {
					tok, q := r.Tokens[int(h.InsertAt)+i], h.TeacherLogProbs[i]
					ids, lps := h.TopIDs[i], h.TopLogProbs[i]
					require.Len(t, ids, 5, "train.credit_file_top_k's default")
					for j := 1; j < len(lps); j++ {
						require.LessOrEqual(t, lps[j], lps[j-1], "ranked, most likely first")
					}
					require.LessOrEqual(t, q, lps[0]+1e-4, "%s hint %d position %d: the sampled token is no likelier than the top one", r.RolloutID, k, i)
					for j, id := range ids {
						if id == tok {
							inTop++
							require.InDelta(t, q, lps[j], 1e-3, "%s hint %d position %d: the sampled token's two log-probs", r.RolloutID, k, i)
						}
					}
					if len(r.Hints) == 1 {
						require.Equal(t, q, r.Teacher[int(h.InsertAt)+i], "the row's teacher column")
					}
				}
			}
		}
	}
	require.Positive(t, hints, "the rules teacher hinted the synthetic tool errors")
	t.Logf("%d hints; sampled token among the teacher's top 5 at %d positions", hints, inTop)
	require.Positive(t, inTop, "the alignment check ran (the run is seeded: the same positions every time)")
}
