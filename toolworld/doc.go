// Package toolworld is a bundled tool-use task world: procedurally generated tasks that
// need two to five tool calls in the right order over a small virtual file tree, a
// calculator and a key-value store, with a deterministic checker (reward 1 or 0).
//
// It sits at the start of the data flow of docs/design.md, in place of an outside harness:
// a collector samples the policy's turns, the Env runs the calls they hold and renders
// the conversation in the policy's chat format, token by token, and Env.Rollout hands
// back a rollout.Rollout (tokens, sampler log-probs, segments, reward) ready for the
// rollout writer. Role headers the harness inserts are context (null log-prob); only
// the tokens the policy generated are trainable.
//
// An episode:
//
//	env, _ := toolworld.New(task, tok, toolworld.Options{})
//	ctx := env.Prompt()                    // system and user turns, then the assistant header
//	for !env.Done() {
//		gen, lps := sample(ctx, env.StopID(), env.Budget())
//		next, _, _ := env.Step(gen, lps)   // the tool turn and the next assistant header
//		ctx = append(append(ctx, gen...), next...)
//	}
//	r := env.Rollout("run-1-0007")
//
// A call is one short line, as a shell takes it: `ls notes`, `cat notes/owl.txt`,
// `grep fox notes`, `calc 41*7`, `get owl`, `set fox 287`; `answer 287` ends the
// episode. The tasks are sized for a tiny byte-tokenizer model: an oracle episode fits
// in 256 tokens. Splits (train, validation, heldout) come from fixed seeds.
//
// Scripted agents drive an Env by text: Oracle (the task's solution), Noisy (a mistake
// with probability p, then the right call) and Random (a baseline near 0% success).
package toolworld
