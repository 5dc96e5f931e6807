// Package collect closes the inner loop on one machine (docs/design.md, The two loops): it
// samples rollouts from the policy in the bundled task world and drops them into the
// spool, where hindsightd trains on them.
//
//	checkpoints/latest ──► Policy (reloaded when latest moves)
//	toolworld train split ──► Episodes: G episodes per task, the policy's turns sampled
//	                          with xla.Sampler, tool calls run by toolworld.Env
//	                     ──► rollout files (tokens, sampler log-probs, segments, reward,
//	                          task_id groups, policy_version) ──► spool/incoming/
//
// Episodes is also the toolworld eval: the same episodes on the held-out split at a
// fixed temperature, summed up as success rate, tool-error rate and tokens per task.
package collect
