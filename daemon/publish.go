package daemon

import (
	"context"
	"time"
)

// publishLoop refreshes the status snapshot (and systemd's STATUS= line) every second,
// so spool counts and rates move even while no file finishes.
func (d *daemon) publishLoop(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			d.stats.publish()
			d.notify.status(d.stats.line())
		}
	}
}
