package gateway

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/hindsight-ai/hindsight/data"
	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/gateway/abstat"
)

// abWith opens an A/B state in dir with a default (step 0) and a candidate
// (step 5) in test, and n sessions per arm rated as given (rating nil: none)
// with the rewards given.
func abWith(t *testing.T, dir string, cfg ABConfig, n int, defRating, candRating int8, defReward, candReward float32) *abTest {
	t.Helper()
	a, err := openAB(dir, cfg)
	require.NoError(t, err)
	require.NoError(t, a.start(Checkpoint{Dir: "model", Step: 0}))
	ok, err := a.propose(Checkpoint{Dir: "ck5", Step: 5})
	require.NoError(t, err)
	require.True(t, ok)
	round, _, _ := a.arms()
	for i := range n {
		for _, arm := range []string{ArmDefault, ArmCandidate} {
			id := fmt.Sprintf("%s-%d", arm, i)
			rating, reward := defRating, defReward
			if arm == ArmCandidate {
				rating, reward = candRating, candReward
			}
			require.NoError(t, a.assigned(id, round, arm))
			a.turn(id, 0.5)
			require.NoError(t, a.feedback(id, &rating, i == 0))
			require.NoError(t, a.outcome(id, reward))
			require.NoError(t, a.ended(id))
		}
	}
	return a
}

func testABConfig() ABConfig {
	c := DefaultABConfig()
	c.Enabled, c.MinSessions, c.Margin, c.Confidence, c.Resamples = true, 5, 0.1, 0.9, 500
	return c
}

// TestABRule: the rule on thumbs-up and on reward, with and without evals.
func TestABRule(t *testing.T) {
	noEvals := func(int64) (map[string]float64, bool) { return nil, false }
	evals := func(cand, def map[string]float64) EvalScores {
		return func(step int64) (map[string]float64, bool) {
			if step == 5 {
				return cand, true
			}
			return def, true
		}
	}
	for _, c := range []struct {
		name               string
		metric             string
		n                  int
		defRate, candRate  int8
		defRew, candRew    float32
		evals              EvalScores
		action, reasonPart string
	}{
		{"collecting", MetricThumbsUp, 4, -1, 1, 0, 1, noEvals, "", "collecting"},
		{"candidate better", MetricThumbsUp, 5, -1, 1, 0, 1, noEvals, "promote", "not worse"},
		{"candidate worse", MetricThumbsUp, 5, 1, -1, 0, 1, noEvals, "rollback", "worse by more than the margin"},
		{"too close to call", MetricThumbsUp, 5, 1, 1, 0, 1, noEvals, "", "undecided"},
		{"eval regression", MetricThumbsUp, 5, -1, 1, 0, 1, evals(map[string]float64{"s": 0.5}, map[string]float64{"s": 0.7}), "rollback", "eval regression: suite s"},
		{"evals within margin", MetricThumbsUp, 5, -1, 1, 0, 1, evals(map[string]float64{"s": 0.65}, map[string]float64{"s": 0.7}), "promote", "not worse"},
		{"evals not in yet", MetricThumbsUp, 5, -1, 1, 0, 1, evals(map[string]float64{}, map[string]float64{"s": 0.7}), "", "waiting for the candidate's evals"},
		{"reward better", MetricReward, 6, 0, 0, 0, 1, noEvals, "promote", "reward"},
		{"reward worse", MetricReward, 6, 0, 0, 1, 0, noEvals, "rollback", "reward"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testABConfig()
			cfg.Metric, cfg.EvalMargin = c.metric, 0.1
			a := abWith(t, t.TempDir(), cfg, c.n, c.defRate, c.candRate, c.defRew, c.candRew)
			defer a.close()
			st := a.stats()
			action, why, d := a.rule(st, c.evals)
			require.Equal(t, c.action, action, why)
			require.Contains(t, why, c.reasonPart)
			require.Equal(t, int64(c.n), d.CandN)
			if c.metric == MetricThumbsUp {
				up := func(r int8) int64 {
					if r == 1 {
						return int64(c.n)
					}
					return 0
				}
				want := abstat.Newcombe(up(c.candRate), int64(c.n), up(c.defRate), int64(c.n), 0.9)
				require.Equal(t, want, st.Diff)
			}
		})
	}
}

// TestABStateDurable: the counts and the decisions are the same after a reopen,
// a decision begins a new round, and a rolled-back step is never proposed again.
func TestABStateDurable(t *testing.T) {
	dir := t.TempDir()
	a := abWith(t, dir, testABConfig(), 5, 1, -1, 1, 0)
	before := a.stats()
	require.Len(t, before.Arms, 2)
	require.Equal(t, ArmStats{Role: ArmCandidate, Checkpoint: Checkpoint{Dir: "ck5", Step: 5}, Sessions: 5, Turns: 5, LatencyMean: 0.5,
		Rated: 5, Down: 5, Comments: 1, ThumbsUp: abstat.Wilson(0, 5, 0.9), Outcomes: 5, Reward: before.Arms[1].Reward}, before.Arms[1])
	a.close()

	a, err := openAB(dir, testABConfig())
	require.NoError(t, err)
	after := a.stats()
	require.Equal(t, before.Arms, after.Arms, "counts replayed")
	action, why, d := a.rule(after, nil)
	require.Equal(t, "rollback", action)
	_, err = a.decide(action, "rule", why, d)
	require.NoError(t, err)
	_, err = a.decide(action, "rule", why, d)
	require.ErrorIs(t, err, ErrNoCandidate, "decided once")
	a.close()

	a, err = openAB(dir, testABConfig())
	require.NoError(t, err)
	defer a.close()
	st := a.stats()
	require.Equal(t, int64(3), st.Round)
	require.Len(t, st.Arms, 1, "no candidate after the decision")
	require.Equal(t, int64(1), st.Rollbacks)
	require.Equal(t, "rollback", st.Decisions[0].Action)
	require.Equal(t, int64(5), st.Decisions[0].CandN)
	ok, err := a.propose(Checkpoint{Dir: "ck5", Step: 5})
	require.NoError(t, err)
	require.False(t, ok, "a rolled-back checkpoint is not tried again")
	ok, err = a.propose(Checkpoint{Dir: "ck7", Step: 7})
	require.NoError(t, err)
	require.True(t, ok, "a newer one is")
}

// TestABConfigErrors: each bad value names its key.
func TestABConfigErrors(t *testing.T) {
	for _, c := range []struct {
		set  func(*ABConfig)
		want string
	}{
		{func(c *ABConfig) { c.Share = 1 }, "gateway.ab.share"},
		{func(c *ABConfig) { c.Metric = "clicks" }, "gateway.ab.metric"},
		{func(c *ABConfig) { c.MinSessions = 0 }, "gateway.ab.min_sessions"},
		{func(c *ABConfig) { c.MaxSessions = 3 }, "gateway.ab.max_sessions"},
		{func(c *ABConfig) { c.Margin = -1 }, "gateway.ab.margin"},
		{func(c *ABConfig) { c.Confidence = 1 }, "gateway.ab.confidence"},
		{func(c *ABConfig) { c.EvalMargin = -0.1 }, "gateway.ab.eval_margin"},
		{func(c *ABConfig) { c.Resamples = 10 }, "gateway.ab.resamples"},
	} {
		cfg := DefaultABConfig()
		cfg.Enabled = true
		c.set(&cfg)
		require.ErrorContains(t, cfg.Validate(), c.want)
	}
	require.NoError(t, DefaultABConfig().Validate(), "off: nothing checked")
}

// TestABDefaultGoneAtStart: a default checkpoint that no longer loads at
// start-up (pruned) is replaced by the newest checkpoint, recorded as a reset.
func TestABDefaultGoneAtStart(t *testing.T) {
	dir := t.TempDir()
	model, root := filepath.Join(dir, "model"), filepath.Join(dir, "checkpoints")
	_, err := data.InitModel(model, data.InitOptions{Preset: "tiny", Seed: 2})
	require.NoError(t, err)
	files := map[string][]byte{}
	ents, err := os.ReadDir(model)
	require.NoError(t, err)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(model, e.Name()))
		require.NoError(t, err)
		files[e.Name()] = b
	}
	ck, err := checkpoint.Write(root, &checkpoint.Contents{Step: 4, Files: files}, 0)
	require.NoError(t, err)
	journals := filepath.Join(dir, "state", "gateway")
	a, err := openAB(filepath.Join(dir, "state", "ab"), testABConfig())
	require.NoError(t, err)
	require.NoError(t, a.start(Checkpoint{Dir: filepath.Join(dir, "pruned"), Step: 2}))
	a.close()

	cfg := DefaultConfig()
	cfg.Enabled, cfg.AB = true, testABConfig()
	g, err := New(Options{Config: cfg, ModelDir: model, Checkpoints: root, JournalDir: journals, Incoming: filepath.Join(dir, "incoming"),
		Backend: "go", Log: zerolog.Nop()})
	require.NoError(t, err)
	st, ok := g.ABStats()
	require.True(t, ok)
	require.Len(t, st.Arms, 1)
	require.True(t, math.IsNaN(st.Arms[0].Reward.Est), "no outcomes")
	st.Arms[0].Reward = abstat.Interval{}
	require.Equal(t, []ArmStats{{Role: ArmDefault, Checkpoint: Checkpoint{Dir: ck, Step: 4}, ThumbsUp: abstat.Wilson(0, 0, 0.9)}}, st.Arms)
	require.Len(t, st.Decisions, 1)
	require.Equal(t, "reset", st.Decisions[0].Action)
	require.Contains(t, st.Decisions[0].Reason, "pruned")
	require.Zero(t, st.Promotions+st.Rollbacks)
}
