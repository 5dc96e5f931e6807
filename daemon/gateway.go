package daemon

import (
	"path/filepath"

	"github.com/hindsight-ai/hindsight/gateway"
	"github.com/hindsight-ai/hindsight/xla"
)

// openGateway opens and binds the chat completions gateway when gateway.enabled:
// it serves the model directory until a checkpoint exists, then the newest one,
// and writes finished sessions into the spool's incoming/.
func (d *daemon) openGateway() error {
	if !d.cfg.Gateway.Enabled {
		return nil
	}
	dir, _ := d.cfg.ModelDir()
	g, err := gateway.New(gateway.Options{
		Config:      d.cfg.Gateway,
		ModelDir:    dir,
		Precision:   d.cfg.Model.Precision,
		Checkpoints: d.cfg.CheckpointDir(),
		JournalDir:  filepath.Join(d.cfg.DataDir, "state", "gateway"),
		Incoming:    filepath.Join(d.cfg.SpoolDir(), "incoming"),
		Backend:     xla.ResolveBackend(d.opts.Backend, d.cfg.Backend),
		Log:         d.opts.Log,
	})
	if err != nil {
		return err
	}
	if err := g.Listen(); err != nil {
		return err
	}
	d.gateway = g
	return nil
}
