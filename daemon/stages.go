package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/hindsight-ai/hindsight/data/checkpoint"
	"github.com/hindsight-ai/hindsight/internal/apikey"
	"github.com/hindsight-ai/hindsight/status"
)

// stage is one goroutine of a run.
type stage struct {
	name string
	run  func(ctx context.Context) error
}

// stages returns a run's goroutines, by mode. work is the context a file in hand is
// finished under (it outlives ctx by the shutdown timeout).
//
//	validate only: watch, publish, watchdog, ingest
//	training:      watch, publish, watchdog, reload, feed, teacher ×K, device, ingest
func (d *daemon) stages(work context.Context) []stage {
	s := []stage{
		{"watch", d.watch},
		{"publish", d.publishLoop},
		{"watchdog", func(ctx context.Context) error { d.notify.watchdog(ctx, d.watchdogAlive); return nil }},
	}
	if d.gateway != nil {
		s = append(s, stage{"gateway", d.gateway.Run})
	}
	if d.hooks != nil && !d.cfg.abOnEngine() { // with the A/B test on an engine the gateway pushes (Hooks.Push)
		s = append(s, stage{"engine_hooks", d.hooks.Run})
	}
	if !d.training() {
		return append(s, stage{"ingest", func(ctx context.Context) error { return d.ingestLoop(ctx, work) }})
	}
	s = append(s, stage{"reload", func(ctx context.Context) error { d.reloadLoop(ctx); return nil }})
	s = append(s, d.pipeline(work)...)
	return append(s, stage{"ingest", func(ctx context.Context) error {
		defer close(d.q.files)
		if err := d.recover(ctx, work); err != nil {
			return err
		}
		return d.ingestLoop(ctx, work)
	}})
}

// pipeline returns the training stages after ingest: feed, the teacher workers and
// the device loop.
func (d *daemon) pipeline(work context.Context) []stage {
	s := []stage{{"feed", func(ctx context.Context) error { return feed(ctx, d.spool, d.q, d.ledger.Before, d.joinLate) }}}
	for range d.cfg.Train.TeacherConcurrency {
		s = append(s, stage{"teacher", func(ctx context.Context) error { return d.teachRollouts(ctx, d.q, d.log) }})
	}
	return append(s, stage{"device", func(ctx context.Context) error {
		return d.loop.Run(ctx, work, d.q.ordered, &observer{stats: d.stats, heartbeat: d.heartbeat, events: d.events,
			metrics: d.metrics, log: d.log, q: d.q, budget: d.cfg.Train.TokenBudget})
	}})
}

// runStages runs stages under one errgroup: the first error cancels the rest; an
// error is recorded in status. It returns when all have returned.
func (d *daemon) runStages(ctx context.Context, ss []stage, onCancel func()) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, st := range ss {
		g.Go(func() error {
			err := st.run(gctx)
			if err != nil {
				d.stats.setError(err, "")
				d.log.Debug().Err(err).Str("stage", st.name).Msg("stage stopped")
			}
			return err
		})
	}
	if onCancel != nil {
		<-gctx.Done()
		onCancel()
	}
	return g.Wait()
}

// serve is a watching run: the status server, then the stages until ctx ends.
func (d *daemon) serve(ctx context.Context) error {
	srv := status.NewServer(d.cfg.Listen, d.stats.snapshot, d.reg, d.opts.Log)
	srv.SetServing(false) // not ready until the spool is recovered
	srv.SetController(d)
	keys, kerr := apikey.Load(d.cfg.ControlKeysFile, "control_keys_file")
	if kerr != nil {
		return kerr
	}
	srv.SetControlKeys(keys)
	skeys, kerr := apikey.Load(d.cfg.StatusKeysFile, "status_keys_file")
	if kerr != nil {
		return kerr
	}
	srv.SetStatusKeys(skeys)
	if d.cfg.StatusTLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(d.cfg.StatusTLSCertFile, d.cfg.StatusTLSKeyFile)
		if err != nil {
			return fmt.Errorf("load status_tls_cert_file / status_tls_key_file: %w", err)
		}
		srv.SetTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}})
	}
	srv.SetPages(status.Pages{History: d.stats.hist.Points, CreditDir: d.cfg.OutputPath(), Tokenizer: d.tokenizer, Clip: d.cfg.Credit.Clip, Storage: &d.storage})
	if err := srv.Start(); err != nil {
		return err
	}
	d.stats.listenAddr = srv.Addr()
	if len(d.cfg.EngineHooks) > 0 && (d.training() || d.cfg.abOnEngine()) { // before the gateway, whose A/B test may push at once
		d.hooks = &checkpoint.Hooks{Hooks: d.cfg.EngineHooks, Root: d.cfg.CheckpointDir(), Interval: d.cfg.Gateway.ReloadInterval, Log: d.opts.Log}
	}
	if err := d.openGateway(); err != nil {
		return err
	}
	d.stats.setGateway(d.gatewayStats)
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			d.log.Warn().Err(err).Msg("stop status server")
		}
	}()

	work, stopWork := d.workContext(ctx)
	defer stopWork()
	if !d.training() { // with training, the pipeline must run to take what recovery hands it
		if err := d.recover(ctx, work); err != nil {
			return err
		}
	}
	d.stats.setState(stateReady)
	srv.SetServing(true)
	d.notify.ready(d.stats.line())
	d.log.Info().Str("listen", srv.Addr()).Str("data_dir", d.cfg.DataDir).Str("version", d.opts.Version).Msg("ready")
	if err := d.events.Ready(d.stats.snapshot()); err != nil {
		return err
	}

	err := d.runStages(ctx, d.stages(work), func() {
		d.stats.setState(stateDraining)
		srv.SetServing(false)
		d.notify.stopping()
		d.log.Info().Msg("draining")
	})
	d.stats.publish()
	d.events.Stopped(d.stats.snapshot())
	if err != nil {
		d.log.Error().Err(err).Msg("pipeline stopped")
		return err
	}
	t := d.spool.Journal().Totals()
	d.log.Info().Int64("rollouts_accepted", t.RolloutsAccepted).Int64("rollouts_rejected", t.RolloutsRejected).
		Float64("uptime_s", time.Since(d.started).Seconds()).Msg("stopped")
	return nil
}

// drain is a run that processes and trains everything waiting, then returns.
func (d *daemon) drain(ctx context.Context) error {
	d.stats.setState(stateReady)
	if err := d.events.Ready(d.stats.snapshot()); err != nil {
		return err
	}
	var err error
	if !d.training() {
		if err = d.recover(ctx, ctx); err == nil {
			err = d.drainIncoming(ctx, ctx)
		}
	} else {
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ss := append(d.pipeline(pctx), stage{"ingest", func(ctx context.Context) error {
			defer close(d.q.files)
			if err := d.recover(ctx, ctx); err != nil {
				return err
			}
			if err := d.drainIncoming(ctx, ctx); err != nil {
				return err
			}
			return d.waitProcessed(ctx, cancel)
		}})
		err = d.runStages(pctx, ss, nil)
	}
	d.stats.setState(stateDraining)
	d.events.Stopped(d.stats.snapshot())
	return err
}

// waitProcessed calls done once processing/ is empty: every decided file trained.
func (d *daemon) waitProcessed(ctx context.Context, done func()) error {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if c, err := d.spool.Counts(); err == nil && c.Processing == 0 {
			done()
			return nil
		}
	}
}

// workContext returns the context file processing and the device loop run under:
// it outlives ctx by cfg.ShutdownTimeout less closeReserve, so a stop finishes the
// file and the step in hand when it can; after that they are abandoned (safe: the
// file is resumed and the step's rollouts trained again on the next start), and
// closing still ends within shutdown_timeout (docs/running.md "Stopping").
func (d *daemon) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var once sync.Once
	timeout := d.cfg.ShutdownTimeout
	stop := context.AfterFunc(ctx, func() {
		d.workDeadline.Store(time.Now().Add(timeout - closeReserve(timeout)).UnixNano())
		t := time.AfterFunc(timeout-closeReserve(timeout), func() {
			d.log.Warn().Stringer("shutdown_timeout", timeout).Stringer("closing_within", closeReserve(timeout)).
				Msg("shutdown timeout nearly over: abandoning the work in hand (it resumes on restart)")
			cancel()
		})
		context.AfterFunc(work, func() { t.Stop() })
	})
	return work, func() { once.Do(func() { stop(); cancel() }) }
}

// graceLeft is how long closing may wait for something still running: at most max,
// and after a stop no later than the work context's end.
func (d *daemon) graceLeft(max time.Duration) time.Duration {
	at := d.workDeadline.Load()
	if at == 0 {
		return max
	}
	return min(max, time.Until(time.Unix(0, at)))
}

// closeReserve is the part of shutdown_timeout kept for closing once the work in
// hand is abandoned (the device loop returns at once, then the servers stop and the
// journal closes: milliseconds on an idle machine): a fifth of it, at most 5 s.
func closeReserve(timeout time.Duration) time.Duration { return min(timeout/5, 5*time.Second) }

// recover finishes what a crash left in processing/, in claim order.
// It stops early, leaving the rest for the next start, when ctx ends.
func (d *daemon) recover(ctx, work context.Context) error {
	d.ingesting.Store(true)
	defer d.ingesting.Store(false)
	todo, err := d.spool.Recover()
	if err != nil {
		return err
	}
	if len(todo) > 0 {
		d.log.Info().Int("files", len(todo)).Msg("resuming files left in processing/")
	}
	for _, c := range todo {
		if ctx.Err() != nil {
			return nil
		}
		if err := d.processClaim(ctx, work, c); err != nil {
			if errors.Is(err, errStopped) {
				return nil
			}
			return err
		}
	}
	return nil
}

// errStopped reports that processing stopped because the work context ended.
var errStopped = errors.New("stopped")
