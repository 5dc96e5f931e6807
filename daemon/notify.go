package daemon

import (
	"context"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
	"github.com/rs/zerolog"
)

// notifier speaks systemd's sd_notify protocol when NOTIFY_SOCKET is set (Type=notify
// units) and does nothing otherwise.
type notifier struct{ log zerolog.Logger }

func newNotifier(log zerolog.Logger) *notifier { return &notifier{log: log} }

func (n *notifier) send(state string) {
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn().Err(err).Msg("sd_notify")
	}
}

func (n *notifier) ready(status string) { n.send(sd.SdNotifyReady + "\nSTATUS=" + status) }
func (n *notifier) stopping()           { n.send(sd.SdNotifyStopping + "\nSTATUS=draining") }
func (n *notifier) status(status string) {
	n.send("STATUS=" + status)
}

// watchdog pings systemd at half of WatchdogSec until ctx ends, while alive says the
// work loop makes progress; without a watchdog it returns at once.
func (n *notifier) watchdog(ctx context.Context, alive func(every time.Duration) bool) {
	every, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Warn().Err(err).Msg("read systemd watchdog settings")
		return
	}
	if every <= 0 {
		return
	}
	t := time.NewTicker(every / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if alive(every) {
				n.send(sd.SdNotifyWatchdog)
			} else {
				n.log.Error().Stringer("watchdog", every).Msg("the device loop made no progress; withholding the watchdog ping")
			}
		}
	}
}
