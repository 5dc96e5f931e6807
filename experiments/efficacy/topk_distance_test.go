package efficacy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data/tokenizer"
	"github.com/hindsight-ai/hindsight/experiments/efficacy/efficacytest"
	"github.com/hindsight-ai/hindsight/rollout"
	"github.com/hindsight-ai/hindsight/toolworld"
	"github.com/hindsight-ai/hindsight/train"
	"github.com/hindsight-ai/hindsight/xla"
)

// TestTopKDistanceFromFull measures how far mode topk is from mode full on realistic
// teacher/student pairs (docs/distillation.md "Whose top k", issue 37): protocol 3's
// warm start (bench/efficacy/protocol3/warmstart/model, the byte policy) reading
// failed attempts of train tasks plain (the student) and with protocol 3's teacher
// contexts in front (the teacher): the sdpo arm's sibling and feedback, and the
// hint arm's world rules. At every hinted position it computes, in float64 (credit),
// each divergence over the full vocabulary and over the top-k buckets of each id
// choice and tail, and logs the mean |topk − full| over positions relative to the
// mean full divergence. It fails if a row is not finite, or if with the student's ids
// and the clamped tail (the default) reverse KL is further from full than with the
// teacher's ids at k 20 (the finding).
func TestTopKDistanceFromFull(t *testing.T) {
	if testing.Short() {
		t.Skip("scores protocol 3's warm start on a few rollouts")
	}
	backend, err := xla.NewBackend(xla.ResolveBackend(efficacytest.BackendSpec(), ""))
	require.NoError(t, err)
	m, err := xla.Open("../../bench/efficacy/protocol3/warmstart/model", xla.OpenOptions{})
	require.NoError(t, err)
	sc, err := xla.NewScorer(backend, m, xla.ScorerOptions{})
	require.NoError(t, err)
	tok := tokenizer.NewBytes()
	tasks, err := toolworld.Tasks(toolworld.SplitTrain, 4)
	require.NoError(t, err)
	type pair struct{ student, teacher [][]float64 }
	pairs := map[string]*pair{"sdpo": {}, "hint": {}}
	for _, arm := range []string{ArmSDPO, ArmHint} {
		spec, err := ArmSpec3(arm, credit.DistillFull)
		require.NoError(t, err)
		// protocol 3's hint stage (protocol3.Hints).
		at, err := newArmTeacher(tok, spec, HintSetup{Rules: RulesWorld3, Place: PlaceRetry, Base: credit.BaseStudent})
		require.NoError(t, err)
		var rolls []*rollout.Rollout
		var ts []toolworld.Task
		for i, task := range tasks {
			win := efficacytest.Played(t, task, task.Solution...)
			lose := efficacytest.Played(t, task, append([]string{[]string{"cta notes.txt", "lss", "grep owl", "cat -n notes/a.txt"}[i%4]}, task.Solution[0])...)
			win.ID, lose.ID = fmt.Sprintf("win%d", i), fmt.Sprintf("lose%d", i)
			rolls, ts = append(rolls, win, lose), append(ts, task, task)
		}
		hints, err := at.step(t.Context(), rolls, ts, rand.New(rand.NewPCG(37, 1)))
		require.NoError(t, err)
		for i, r := range rolls {
			if len(hints[i]) == 0 {
				continue
			}
			xr := train.ToTrainer(r, hints[i], train.NewRule(spec.Credit, tok))
			_, cache, err := sc.Score(t.Context(), xr.Tokens)
			require.NoError(t, err)
			for _, h := range xr.Hints {
				full := xla.TeacherView{Mode: credit.DistillFull}
				_, s, err := sc.ScoreHintedView(t.Context(), xr.Tokens, cache, []credit.Hint{{InsertAt: h.InsertAt, End: h.End}}, full)
				require.NoError(t, err)
				_, q, err := sc.ScoreHintedView(t.Context(), xr.Tokens, cache, []credit.Hint{h}, full)
				require.NoError(t, err)
				V := s[0].K
				for row := range s[0].Rows() {
					p := pairs[map[string]string{ArmSDPO: "sdpo", ArmHint: "hint"}[arm]]
					p.student = append(p.student, f64(s[0].LogProbs[row*V:(row+1)*V]))
					p.teacher = append(p.teacher, f64(q[0].LogProbs[row*V:(row+1)*V]))
				}
			}
			cache.Close()
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| context | positions | divergence | mean full | k | student ids | teacher ids | union | student ids, exact tail |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, name := range []string{"sdpo", "hint"} {
		p := pairs[name]
		require.NotEmpty(t, p.student, "%s: hinted positions scored", name)
		for _, div := range []credit.Divergence{credit.DivReverseKL, credit.DivForwardKL, credit.DivJSD} {
			for _, k := range []int{20, 100} {
				cfg := credit.DefaultDistillConfig()
				cfg.Mode, cfg.Divergence, cfg.TopK = credit.DistillTopK, div, k
				var meanFull float64
				off := map[string]float64{}
				for i := range p.student {
					z := p.student[i] // log-probs are logits up to a constant
					dFull, _ := credit.DistillPosition(cfg, z, credit.NewTopK(p.teacher[i], len(z)))
					meanFull += dFull
					for _, c := range []struct {
						name string
						ids  credit.TopKIDs
						tail credit.TailMode
					}{{"student", credit.IDsStudent, credit.TailClamped}, {"teacher", credit.IDsTeacher, credit.TailClamped},
						{"union", credit.IDsUnion, credit.TailClamped}, {"student exact", credit.IDsStudent, credit.TailExact}} {
						cc := cfg
						cc.TopKIDs, cc.Tail = c.ids, c.tail
						d, g := credit.DistillPosition(cc, z, credit.SelectTopK(c.ids, z, p.teacher[i], k))
						require.False(t, math.IsNaN(d) || math.IsInf(d, 0), "%s %s %s k %d", name, div, c.name, k)
						require.False(t, math.IsNaN(g[0]))
						off[c.name] += math.Abs(d - dFull)
					}
				}
				n := float64(len(p.student))
				meanFull /= n
				rel := func(c string) string { return fmt.Sprintf("%.2g (%.1f%%)", off[c]/n, 100*off[c]/n/meanFull) }
				fmt.Fprintf(&table, "| %s | %d | %s | %.3g | %d | %s | %s | %s | %s |\n", name, len(p.student), div, meanFull, k,
					rel("student"), rel("teacher"), rel("union"), rel("student exact"))
				if div == credit.DivReverseKL && k == 20 {
					require.LessOrEqual(t, off["student"], off["teacher"], "%s: reverse KL at k 20, student ids no further from full than the teacher's", name)
				}
			}
		}
	}
	t.Logf("mean |topk − full| per position (nats; %% of the mean full divergence), protocol 3's warm start:\n%s", table.String())

	// The sampling temperature (docs/distillation.md "The sampling temperature"): the
	// same pairs' full divergence with both sides' logits divided by T, as a rollout
	// sampled at T is scored (the log-probs stand for the logits: log-softmax is
	// shift-invariant).
	var temps strings.Builder
	fmt.Fprintf(&temps, "| context | divergence | T = 0.7 | T = 1 | T = 1.5 |\n|---|---|---:|---:|---:|\n")
	for _, name := range []string{"sdpo", "hint"} {
		p := pairs[name]
		for _, div := range []credit.Divergence{credit.DivReverseKL, credit.DivForwardKL, credit.DivJSD} {
			cfg := credit.DefaultDistillConfig()
			cfg.Mode, cfg.Divergence = credit.DistillFull, div
			fmt.Fprintf(&temps, "| %s | %s |", name, div)
			for _, T := range []float64{0.7, 1, 1.5} {
				var mean float64
				for i := range p.student {
					z := credit.Tempered(p.student[i], T)
					a := credit.LogSoftmax(credit.Tempered(p.teacher[i], T))
					d, _ := credit.DistillPosition(cfg, z, credit.NewTopK(a, len(z)))
					require.False(t, math.IsNaN(d) || math.IsInf(d, 0), "%s %s T %g", name, div, T)
					mean += d
				}
				fmt.Fprintf(&temps, " %.3g |", mean/float64(len(p.student)))
			}
			temps.WriteString("\n")
		}
	}
	t.Logf("mean full divergence per position (nats) at sampling temperature T:\n%s", temps.String())
}

func f64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
