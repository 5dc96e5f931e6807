package status

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	stdlog "log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	hindsightv1 "github.com/hindsight-ai/hindsight/api/hindsight/v1"
	"github.com/hindsight-ai/hindsight/api/hindsight/v1/hindsightv1connect"
	"github.com/hindsight-ai/hindsight/internal/apikey"
)

// Limits of WatchStatusRequest.interval.
const (
	defaultWatchInterval = time.Second
	minWatchInterval     = 100 * time.Millisecond
)

// maxRequestBytes bounds a decoded request message; none of ours comes near it.
const maxRequestBytes = 1 << 20

// Server serves the status service, gRPC health, gRPC reflection and Prometheus metrics on one port
// (gRPC, gRPC-Web and Connect/HTTP+JSON through connect-go; HTTP/2 without TLS via http.Server.Protocols SetUnencryptedHTTP2).
//
// Routes:
//
//	/hindsight.v1.StatusService/*           the status service
//	/hindsight.v1.ControlService/*          pause and resume (through SetController)
//	/grpc.health.v1.Health/*                gRPC health, for "" and "hindsight.v1.StatusService"
//	/grpc.reflection.v1.ServerReflection/*  reflection (and v1alpha), for grpcurl and friends
//	GET /metrics                            Prometheus metrics from the gatherer
//	GET /healthz                            200 "ok" while serving, else 503
//	GET /, /status/history.json, /viewer/   status page and credit viewer (SetPages; pages.go)
//
// A Server reports SERVING from the start; the daemon calls SetServing as its readiness
// changes. A Server is started once and shut down once.
type Server struct {
	addr     string
	snapshot func() *hindsightv1.Status
	log      zerolog.Logger

	health  *grpchealth.StaticChecker
	serving atomic.Bool
	http    *http.Server

	// done is closed by Shutdown to end WatchStatus streams; stopBase then cancels the
	// context every request derives from, which ends any other open stream (a health
	// Watch, a reflection session) so that http.Server.Shutdown does not wait on it.
	done     chan struct{}
	doneOnce sync.Once
	stopBase context.CancelFunc

	mu       sync.Mutex
	listener net.Listener // set by Start
	control  Controller   // set by SetController; nil: ControlService is UNIMPLEMENTED
	pages    *Pages       // set by SetPages; nil: the page routes are 404
	// controlKeys, set by SetControlKeys before Start, are the keys ControlService
	// needs (Authorization: Bearer); nil: none.
	controlKeys *apikey.Keys
	// statusKeys, set by SetStatusKeys before Start, are the keys every route but
	// /healthz and gRPC health needs (ControlService: when controlKeys is nil).
	statusKeys *apikey.Keys
	// tls, set by SetTLS before Start, serves over TLS; nil: plain HTTP and h2c.
	tls *tls.Config
}

// SetStatusKeys makes every route but /healthz and gRPC health answer 401 to a
// request without one of k's keys; ControlService keeps its own keys when it has
// them. Call it before Start.
func (s *Server) SetStatusKeys(k *apikey.Keys) { s.statusKeys = k }

// SetTLS serves over TLS with cfg (certificates set; HTTP/2 by ALPN). Call it before
// Start.
func (s *Server) SetTLS(cfg *tls.Config) { s.tls = cfg }

// guard is the status keys' check in front of mux.
func (s *Server) guard(mux http.Handler) http.Handler {
	health := "/" + grpchealth.HealthV1ServiceName + "/"
	control := "/" + hindsightv1connect.ControlServiceName + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := s.statusKeys == nil || r.URL.Path == "/healthz" || strings.HasPrefix(r.URL.Path, health) ||
			(s.controlKeys != nil && strings.HasPrefix(r.URL.Path, control))
		if open {
			mux.ServeHTTP(w, r)
			return
		}
		s.statusKeys.Require(mux, func(w http.ResponseWriter) {
			http.Error(w, "missing or invalid API key (Authorization: Bearer <key>)", http.StatusUnauthorized)
		}).ServeHTTP(w, r)
	})
}

// SetControlKeys makes ControlService answer 401 (Connect: unauthenticated) to a
// request without one of k's keys. Call it before Start.
func (s *Server) SetControlKeys(k *apikey.Keys) { s.controlKeys = k }

// Controller carries out ControlService calls: the daemon pauses and resumes its
// pipeline. by is who asked (the request's by, else the client's address).
type Controller interface {
	Pause(by, reason string) *hindsightv1.PauseState
	Resume(by string) *hindsightv1.PauseState
}

// SetController makes ControlService pause and resume through c. Without one, its
// calls fail with UNIMPLEMENTED.
func (s *Server) SetController(c Controller) {
	s.mu.Lock()
	s.control = c
	s.mu.Unlock()
}

func (s *Server) controller() Controller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.control
}

// NewServer returns a Server that will listen on addr (host:port; port 0 picks a free
// port) once started. snapshot returns the daemon's latest published status; it must be
// cheap and safe for concurrent use, and the Server never modifies what it returns. A nil
// snapshot result is reported to clients as UNAVAILABLE. gatherer supplies /metrics; if it
// is nil, the route is not registered.
func NewServer(addr string, snapshot func() *hindsightv1.Status, gatherer prometheus.Gatherer, log zerolog.Logger) *Server {
	log = log.With().Str("component", "server").Logger()
	baseCtx, stopBase := context.WithCancel(context.Background())
	s := &Server{
		addr:     addr,
		snapshot: snapshot,
		log:      log,
		health:   grpchealth.NewStaticChecker(hindsightv1connect.StatusServiceName),
		done:     make(chan struct{}),
		stopBase: stopBase,
	}
	s.serving.Store(true)

	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxRequestBytes)}
	mux := http.NewServeMux()
	mux.Handle(hindsightv1connect.NewStatusServiceHandler(&statusService{s: s}, opts...))
	controlPath, control := hindsightv1connect.NewControlServiceHandler(&controlService{s: s}, opts...)
	mux.Handle(controlPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.controlKeys.Require(control, func(w http.ResponseWriter) {
			http.Error(w, "missing or invalid API key (Authorization: Bearer <key>)", http.StatusUnauthorized)
		}).ServeHTTP(w, r)
	}))
	mux.Handle(grpchealth.NewHandler(s.health, opts...))
	reflector := grpcreflect.NewStaticReflector(
		hindsightv1connect.StatusServiceName,
		hindsightv1connect.ControlServiceName,
		grpchealth.HealthV1ServiceName,
	)
	mux.Handle(grpcreflect.NewHandlerV1(reflector, opts...))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector, opts...))
	if gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /healthz", s.healthz)
	s.registerPages(mux)

	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true) // gRPC clients speak HTTP/2 without TLS (h2c)
	s.http = &http.Server{
		Handler:           s.guard(mux),
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		// No write timeout: WatchStatus streams stay open for as long as the client wants.
		BaseContext: func(net.Listener) context.Context { return baseCtx },
		ErrorLog:    stdlog.New(warnWriter{log}, "", 0),
	}
	return s
}

// Start binds the listen address and serves in the background. It returns an error that
// names the address if the address cannot be bound, or if the Server was already started.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return fmt.Errorf("start status server on %s: already started", s.addr)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.addr, err)
	}
	s.listener = ln
	serve := s.http.Serve
	if s.tls != nil {
		s.http.TLSConfig = s.tls
		s.http.Protocols.SetHTTP2(true)
		serve = func(ln net.Listener) error { return s.http.ServeTLS(ln, "", "") }
	}
	s.log.Info().Str("addr", ln.Addr().String()).Bool("tls", s.tls != nil).Bool("status_keys", s.statusKeys != nil).Msg("status server listening")
	go func() {
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Str("addr", ln.Addr().String()).Msg("status server stopped")
		}
	}()
	return nil
}

// Addr returns the bound address once Start has succeeded (with the real port when the
// configured port was 0), and the configured address before that.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.addr
}

// SetServing sets the gRPC health status of "" (the whole server) and of
// "hindsight.v1.StatusService" to SERVING (ok) or NOT_SERVING (!ok), and /healthz to
// 200 or 503 to match.
func (s *Server) SetServing(ok bool) {
	status := grpchealth.StatusNotServing
	if ok {
		status = grpchealth.StatusServing
	}
	s.serving.Store(ok)
	s.health.SetStatus("", status)
	s.health.SetStatus(hindsightv1connect.StatusServiceName, status)
}

// Shutdown ends open WatchStatus streams (clients see UNAVAILABLE) and other streams,
// then shuts the HTTP server down gracefully: it stops accepting connections and waits
// for in-flight requests until ctx is done, after which it closes the remaining
// connections and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.doneOnce.Do(func() { close(s.done) })
	s.stopBase()
	err := s.http.Shutdown(ctx)
	if err != nil {
		_ = s.http.Close()
		return fmt.Errorf("shut down status server: %w", err)
	}
	s.log.Debug().Msg("status server shut down")
	return nil
}

// healthz serves GET /healthz for probes that speak plain HTTP.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.serving.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not serving\n"))
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}

// warnWriter turns net/http's error log lines (a broken connection, a handler panic)
// into Warn events.
type warnWriter struct{ log zerolog.Logger }

func (w warnWriter) Write(p []byte) (int, error) {
	w.log.Warn().Msg(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
