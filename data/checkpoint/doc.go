// Package checkpoint writes and finds hindsight's checkpoints: step directories
// (step-NNNNNN) that are Hugging Face model directories transformers, vLLM and SGLang
// load as they are (the policy's weights and every non-weight file of the model
// directory, ModelFiles), with the trainer's own state beside them where no server
// looks (trainer/, adapter/, trainer_state.json) and a manifest of sizes and hashes
// written last.
//
// In the data flow (docs/design.md) it is where the device goroutine's steps become
// durable: Write puts every file into a temp directory, fsyncs it, renames it into
// place and moves the latest link, so a crash leaves either no new step or a complete
// one; Latest and Verify find the newest complete one at start-up for an exact resume.
// Hooks (hooks.go) follow the latest link and tell serving engines (SGLang, vLLM) about
// each new checkpoint; they run whether the gateway is on or off.
package checkpoint
