package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// A full disk is a pause, not a crash: the write that failed with ENOSPC (or EDQUOT)
// is retried every disk_full_retry, and meanwhile nothing is claimed, stepped or
// checkpointed, and status says "paused: disk full: <path>". The writes themselves
// are crash-safe (temp file → fsync → rename; a failed one removes its temp), so a
// failed attempt leaves the old state and the retry starts from it.

// isDiskFull reports whether err is a full disk or an exhausted quota.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// errPath is the file named by err (a *PathError or *LinkError), else fallback.
func errPath(err error, fallback string) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Path
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.New
	}
	return fallback
}

// injectFault, when set by a test, runs before each write retryDiskFull guards and
// may fail it (e.g. with ENOSPC); op names the write. It is the seam for a full disk,
// which tests cannot otherwise make (no small tmpfs in CI).
var injectFault func(op string) error

// retryDiskFull runs write until it does not fail with a full disk: after each such
// failure it pauses the daemon (disk full, op, the path) and waits disk_full_retry.
// Other errors are returned at once; so is ctx's, if ctx ends while waiting. A
// success after a failure ends the disk-full pause.
func (d *daemon) retryDiskFull(ctx context.Context, op, path string, write func() error) error {
	for {
		var err error
		if f := injectFault; f != nil {
			err = f(op)
		}
		if err == nil {
			err = write()
		}
		if err == nil {
			if d.pauser.clearDiskFull() {
				d.log.Warn().Str("op", op).Msg("disk has room again; claiming and checkpointing resume")
			}
			return nil
		}
		if !isDiskFull(err) {
			return err
		}
		wait := d.cfg.DiskFullRetry
		first := !d.pauser.diskIsFull()
		p := errPath(err, path)
		d.pauser.setDiskFull(op, p, time.Now().Add(wait))
		d.stats.setError(err, "")
		ev := d.log.Debug()
		if first {
			ev = d.log.Error()
		}
		ev.Err(err).Str("op", op).Str("path", p).Stringer("retry_in", wait).
			Msg("disk full: claiming, stepping and checkpointing pause until the write succeeds")
		if err := d.sleepAlive(ctx, wait); err != nil {
			return err
		}
	}
}

// sleepAlive waits for dur or ctx, feeding the watchdog: waiting for disk space is
// not a hung step.
func (d *daemon) sleepAlive(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	beat := time.NewTicker(time.Second)
	defer beat.Stop()
	for {
		d.heartbeat()
		select {
		case <-t.C:
			return nil
		case <-beat.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
