package xla

import (
	"fmt"
	"math"
	"testing"

	"github.com/hindsight-ai/hindsight/credit"
	"github.com/hindsight-ai/hindsight/data"
)

// loraBenchModels are the shapes of BenchmarkLoRAStep: the `small` preset (~3.5M
// parameters) and a ~99M-parameter llama (12 layers, d = 768, MHA, SwiGLU 2560),
// both with the byte vocabulary.
func loraBenchModels(b *testing.B) map[string]*data.ModelConfig {
	small, err := data.PresetConfig("small", 265)
	if err != nil {
		b.Fatal(err)
	}
	m100 := testConfig(b, tinyFields(map[string]any{"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12,
		"num_key_value_heads": 12, "head_dim": 64, "intermediate_size": 2560, "rope_theta": 500000.0}))
	return map[string]*data.ModelConfig{"small": small, "llama-100m": m100}
}

// BenchmarkLoRAStep compares full training with LoRA (rank 16, alpha 32, every
// projection) on whole optimizer steps (student pass, live-teacher hinted pass,
// credit, chunked gradient, AdamW) over one T-token rollout ($HINDSIGHT_BENCH_LORA_T,
// default 256), for the `small` preset and a ~100M-parameter model, all four in one
// process so their ratios are fair. It reports trained tokens/s, the trainer's state
// (weights, gradient accumulators, AdamW moments: Trainer.StateBytes) and the
// trained parameters.
//
//	HINDSIGHT_TEST_BACKEND=xla-cpu go test -run '^$' -bench LoRAStep -benchtime 3x -timeout 30m ./xla/
func BenchmarkLoRAStep(b *testing.B) {
	backend := newTestBackend(b)
	T := envInt(b, "HINDSIGHT_BENCH_LORA_T", 256)
	models := loraBenchModels(b)
	for _, name := range []string{"small", "llama-100m"} {
		mc := models[name]
		for _, mode := range []string{"full", "lora"} {
			b.Run(fmt.Sprintf("%s/T=%d/%s", name, T, mode), func(b *testing.B) {
				ws, err := data.InitWeights(mc, 3)
				if err != nil {
					b.Fatal(err)
				}
				m, err := Load(mc, newMemWeights(ws), PrecisionF32)
				if err != nil {
					b.Fatal(err)
				}
				ws = nil
				opts := TrainerOptions{Chunk: 128, Scorer: ScorerOptions{Chunk: 128}, Credit: credit.DefaultConfig(),
					Optimizer: DefaultAdamW(), TeacherModel: DefaultTeacherModel()}
				if mode == "lora" {
					opts.LoRA = LoRAConfig{Rank: 16, Alpha: 32, Targets: DefaultLoRATargets()}
				}
				tr, err := NewTrainer(backend, m, opts)
				if err != nil {
					b.Fatal(err)
				}
				r := credit.Sequence{ID: "r", TaskID: "t", Tokens: testTokens(T, mc.VocabSize, 52), Sampler: make([]float64, T),
					Trainable: make([]bool, T), Reward: 1, HasReward: true,
					Hints: []credit.Hint{{InsertAt: T / 2, End: T/2 + T/4, Tokens: testTokens(16, mc.VocabSize, 53)}}}
				trainable := 0
				for t := range T {
					r.Sampler[t] = math.NaN()
					if t >= 16 {
						r.Trainable[t], r.Sampler[t] = true, -2
						trainable++
					}
				}
				met, err := tr.Step(b.Context(), []credit.Sequence{r}) // compiles
				if err != nil {
					b.Fatal(err)
				}
				if !met.Updated {
					b.Fatal("the step made no update: the benchmark would time no gradient pass")
				}
				b.ResetTimer()
				for b.Loop() {
					if _, err := tr.Step(b.Context(), []credit.Sequence{r}); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				st := tr.StateBytes()
				b.ReportMetric(float64(trainable*b.N)/b.Elapsed().Seconds(), "tokens/s")
				b.ReportMetric(float64(st.Total())/(1<<20), "state-MiB")
				b.ReportMetric(float64(st.Grads+st.Optimizer)/(1<<20), "grads+adam-MiB")
				b.ReportMetric(float64(st.Trainable/4), "trained-params")
				b.ReportMetric(float64(st.Weights/4), "params")
			})
		}
	}
}
