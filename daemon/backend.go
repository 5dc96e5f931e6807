package daemon

import "github.com/hindsight-ai/hindsight/xla"

// backendChoice resolves the compute backend once per run — the -backend flag, else
// the config's backend:, else $GOMLX_BACKEND, else auto (the fastest this machine has:
// docs/performance.md "Which backend") — and logs which and why, so the trainer and
// the gateway run on the same one and a test's log says which plugin it used.
func (d *daemon) backendChoice() xla.Choice {
	d.backendOnce.Do(func() {
		d.backend = xla.ChooseBackend(d.opts.Backend, d.cfg.Backend, xla.AutoBackend)
		d.log.Info().Str("spec", d.backend.Spec).Str("reason", d.backend.Reason).Msg("backend chosen")
	})
	return d.backend
}
