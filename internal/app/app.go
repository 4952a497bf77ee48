// Package app is the bridge as a library: it wires the configuration, the Pulsar
// client, the producer pool, ingress, egress and the operations endpoints into one
// App with New, Run, Reload and Shutdown. cmd/bridge only parses flags and calls it.
package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/internal/certfile"
	"github.com/recordio-bridge/bridge/internal/pulsarpool"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/oauth2"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Options configure New.
type Options struct {
	// ConfigPath is the configuration file; Run watches it and reloads it on change.
	ConfigPath string
	// Logger receives the bridge's log; nil discards it.
	Logger *slog.Logger
	// Version is reported by the metrics, traces and the start-up log line.
	Version string
	// Revision is the commit of the build, for bridge_build_info ("" when unknown).
	Revision string
}

// App is a bridge: its listeners, Pulsar client, producers and current configuration.
type App struct {
	path    string
	version string
	log     *slog.Logger
	running config.Config // what start-up used; fields that need a restart stay as they were
	snap    atomic.Pointer[snapshot]
	reload  sync.Mutex
	lastErr atomic.Pointer[string] // the last reload's problem, shown by /readyz

	client   *pulsar.Client
	oauth2   *oauth2.Source // nil unless pulsar.oauth2
	budget   *budget.Budget
	prods    *pulsarpool.Pool
	subs     *pulsarpool.Subscriber
	ingress  *ingress.Server
	egress   *egress.Server
	metrics  *telemetry.Metrics
	tracing  *telemetry.Tracing
	draining atomic.Bool

	data, ops       *http.Server
	dataLn, opsLn   net.Listener
	serving         sync.WaitGroup // the listeners' Serve loops and the watcher
	stopWatch       context.CancelFunc
	watchCtx        context.Context
	shutdownOnce    sync.Once
	shutdownStarted chan struct{} // closed when Shutdown begins
	shutdownDone    chan struct{} // closed when Shutdown has finished
	shutdownErr     error
}

// New loads the configuration, connects the Pulsar client and binds the listeners.
// Nothing is served until Run.
func New(o Options) (_ *App, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	snap, err := load(o.ConfigPath)
	if err != nil {
		return nil, err
	}
	cfg := snap.cfg
	setMemoryLimit(cfg.Memory, log)
	// a is not the named result: a failed New returns nil, and the undo steps still
	// need it.
	a := &App{path: o.ConfigPath, version: o.Version, log: log, running: cfg,
		shutdownStarted: make(chan struct{}), shutdownDone: make(chan struct{})}
	a.snap.Store(snap)
	admission.SetLogger(log.With("component", "auth"))
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	if a.metrics, err = telemetry.NewMetrics(telemetry.Build{Version: o.Version, Revision: o.Revision}); err != nil {
		return nil, err
	}
	a.metrics.Loaded(snap.loaded)
	undo = append(undo, func() { _ = a.metrics.Shutdown(context.Background()) })
	copts := pulsar.ClientOptions{URL: cfg.Pulsar.URL, TLSCAFile: cfg.Pulsar.TLS.CAFile, TLSCertFile: cfg.Pulsar.TLS.CertFile,
		TLSKeyFile: cfg.Pulsar.TLS.KeyFile, TLSServerName: cfg.Pulsar.TLS.ServerName, OperationTimeout: cfg.Pulsar.OperationTimeout.D(),
		KeepAlive: cfg.Pulsar.KeepAlive.D(), WriteTimeout: cfg.Pulsar.WriteTimeout.D(), Logger: log.With("component", "pulsar"),
		TLSFileRefused: func(error) { a.metrics.CredentialsRefused("pulsar_tls") }}
	if a.oauth2, err = pulsarAuth(cfg.Pulsar, &copts, log.With("component", "oauth2"), func(error) { a.metrics.CredentialsRefused("pulsar_oauth2") }); err != nil {
		return nil, err
	}
	if a.oauth2 != nil {
		undo = append(undo, a.oauth2.Close)
	}
	if a.client, err = pulsar.NewClient(copts); err != nil {
		return nil, err
	}
	undo = append(undo, func() { a.client.Close() })
	a.budget = budget.New(int64(cfg.Memory.Budget))
	undo = append(undo, a.budget.Close)
	a.prods = pulsarpool.New(a.client, pulsarpool.Options{
		Producer: pulsar.ProducerOptions{
			SendTimeout: cfg.Ingress.PublishTimeout.D(), Compression: compressions[cfg.Pulsar.Compression],
			HashingScheme:      hashingSchemes[cfg.Pulsar.HashingScheme],
			MaxPendingMessages: 10000, MaxPendingBytes: 64 << 20,
		},
		CreateTimeout: cfg.Pulsar.OperationTimeout.D(), IdleTimeout: cfg.Pulsar.ProducerIdleTimeout.D(),
		MaxProducers: cfg.Pulsar.MaxProducers, NamedAccessMode: namedAccessModes[cfg.Pulsar.NamedStreamAccessMode], Budget: a.budget,
		Logger: log.With("component", "producers"),
	})
	undo = append(undo, a.prods.Close)
	if a.tracing, err = telemetry.SetupTracing(context.Background(), o.Version, tracingOf(cfg)); err != nil {
		return nil, err
	}
	undo = append(undo, a.shutdownTracing)
	if a.tracing.Enabled {
		to := a.tracing.Options()
		log.Info("tracing on (OTLP)", "endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")+os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
			"segmentRecords", to.SegmentRecords, "segmentInterval", to.SegmentInterval.String(), "propagateUnsampled", to.PropagateUnsampled)
		if err := a.metrics.ObserveSpans(a.tracing.Spans); err != nil {
			return nil, err
		}
	}
	a.ingress = ingress.New(a.prods, log.With("component", "ingress"), a.metrics, a.tracing)
	a.ingress.Update(snap.table, snap.auth, limitsOf(cfg))
	a.subs = pulsarpool.NewSubscriber(a.client, a.budget)
	a.subs.DeadLetters(a.prods) // retry.maxDeliveries: dead letters go through the producer pool
	a.egress = egress.New(a.subs, log.With("component", "egress"), a.metrics, a.tracing)
	if err := a.metrics.ObservePulsar(func() telemetry.PulsarStats {
		s := a.prods.Stats()
		a.subs.AddStats(&s)
		return s
	}); err != nil {
		return nil, err
	}
	if err := a.metrics.ObservePattern(a.subs.PatternStats); err != nil {
		return nil, err
	}
	if err := a.metrics.ObserveMemory(func() telemetry.MemoryStats {
		st := a.budget.Stats()
		ms := telemetry.MemoryStats{Limit: st.Limit, Used: st.Used, Peak: st.Peak}
		ms.ConsumerQueues, ms.ConsumerReserved, ms.Egress = a.subs.Memory()
		ms.Ingress = max(0, st.Used-ms.ConsumerQueues-ms.ConsumerReserved-ms.Egress)
		return ms
	}); err != nil {
		return nil, err
	}
	if err := a.metrics.ObserveJWKS(jwksStats); err != nil {
		return nil, err
	}
	if err := a.metrics.ObserveHealth(func(ctx context.Context) telemetry.Health {
		ready, detail := a.readiness(ctx)
		return telemetry.Health{BrokerUp: detail["broker"] == "connected", Ready: ready}
	}); err != nil {
		return nil, err
	}
	a.egress.Update(snap.table, snap.auth, egressLimitsOf(cfg))

	if a.data, err = a.dataServer(cfg); err != nil {
		return nil, err
	}
	a.ops = &http.Server{Handler: a.opsHandler(), ReadHeaderTimeout: 10 * time.Second}
	if a.dataLn, err = net.Listen("tcp", cfg.Listen.Data); err != nil {
		return nil, fmt.Errorf("listen.data: %w", err)
	}
	undo = append(undo, func() { a.dataLn.Close() })
	if a.opsLn, err = net.Listen("tcp", cfg.Listen.Ops); err != nil {
		return nil, fmt.Errorf("listen.ops: %w", err)
	}
	a.watchCtx, a.stopWatch = context.WithCancel(context.Background())
	return a, nil
}

// dataServer is the HTTP server of the data listener: ingress POSTs, egress GETs and
// their acknowledgement POSTs.
func (a *App) dataServer(cfg config.Config) (*http.Server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		status := http.StatusInternalServerError
		var he *echo.HTTPError
		if errors.As(err, &he) {
			status = he.Code
		}
		if !c.Response().Committed {
			closeIfBody(c.Request(), c.Response().Header())
			_ = c.JSON(status, map[string]any{"status": status, "error": err.Error()})
		}
	}
	// POST: a stream's /ack endpoint, else ingress; GET: egress streams.
	e.POST("/*", func(c echo.Context) error {
		if a.egress.IsAck(c.Request().URL.Path) {
			return a.egress.HandleAck(c)
		}
		return a.ingress.Handle(c)
	})
	e.GET("/*", a.egress.Handle)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	data := &http.Server{Handler: e, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	if cfg.Listen.TLS.CertFile != "" {
		// Renewed files (a cert-manager Secret) are served from the next handshake on.
		certs, err := certfile.NewPair(cfg.Listen.TLS.CertFile, cfg.Listen.TLS.KeyFile, certfile.Options{Logger: a.log.With("component", "tls"),
			Refused: func(error) { a.metrics.CredentialsRefused("listen_tls") }})
		if err != nil {
			return nil, fmt.Errorf("listen.tls: %w", err)
		}
		protocols.SetHTTP2(true) // negotiated by ALPN
		data.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
	} else {
		protocols.SetUnencryptedHTTP2(true) // h2c
	}
	return data, nil
}

// DataAddr is the address the data listener is bound to.
func (a *App) DataAddr() net.Addr { return a.dataLn.Addr() }

// OpsAddr is the address the operations listener is bound to.
func (a *App) OpsAddr() net.Addr { return a.opsLn.Addr() }

// Run serves until ctx ends, then shuts down within the configured drain timeout, or
// until Shutdown is called and has finished. It returns nil after a shutdown.
func (a *App) Run(ctx context.Context) error {
	serveOn := func(s *http.Server, ln net.Listener, name string) {
		defer a.serving.Done()
		var err error
		if s.TLSConfig != nil {
			err = s.ServeTLS(ln, "", "")
		} else {
			err = s.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("listener failed", "listener", name, "error", err.Error())
		}
	}
	a.serving.Add(3)
	go serveOn(a.data, a.dataLn, "data")
	go serveOn(a.ops, a.opsLn, "ops")
	snap := a.snap.Load()
	a.log.Info("bridge started", "version", a.version, "data", a.dataLn.Addr().String(), "ops", a.opsLn.Addr().String(),
		"pulsar", a.running.Pulsar.URL, "routes", len(snap.table.Routes()), "streams", len(snap.table.Streams()), "config", a.path)

	// Reloads on file changes (including ConfigMap symlink swaps).
	go func() {
		defer a.serving.Done()
		if err := config.Watch(a.watchCtx, a.path, 100*time.Millisecond, func() { a.Reload("file change") }); err != nil {
			a.log.Warn("configuration file not watched; reload with SIGHUP", "error", err.Error())
		}
	}()

	select {
	case <-ctx.Done():
		drainFor := a.snap.Load().cfg.Ingress.DrainTimeout.D()
		dctx, cancel := context.WithTimeout(context.Background(), drainFor)
		defer cancel()
		_ = a.Shutdown(dctx)
	case <-a.shutdownStarted:
		<-a.shutdownDone
	}
	return nil
}

// Shutdown drains the bridge and closes it, returning by ctx's deadline as net/http's
// Server.Shutdown does; every step shares that deadline, in this order and split:
//
//  1. /readyz turns 503; the data listener stops accepting; ingress refuses new streams
//     (503) and stops reading the bodies of open ones; egress streams flush, acknowledge
//     what they wrote and end.
//  2. Open ingress streams settle what they read, until the drain's end: the deadline
//     less the shares of steps 4 and 5. Shortly before it (half the drain, at most a
//     second) what is unsettled is answered "outcome unknown", and every write to a
//     client is cut at the drain's end.
//  3. Then (or once every stream ended) the data listener's remaining connections are
//     closed and the memory budget refuses every waiter.
//  4. The producers flush what they still hold until the deadline less step 5's share
//     (a fifth of the time, at most producerShare, plus whatever the drain left);
//     then the Pulsar client closes its connections, cutting what is left.
//  5. The ops listener closes; metrics and traces are flushed with the rest of the time
//     (at least a tenth, at most telemetryShare, more if the earlier steps ended
//     early). They come last, so a hung collector cannot take the producers' time.
//
// After the deadline nothing waits: what is still open is closed at once and Shutdown
// returns ctx's error. It returns nil when every stream ended and everything flushed in
// time. Without a deadline each step waits for its own bound (the producers' send
// timeout, the exporters' timeouts) or until ctx is cancelled. A second call waits for
// the first.
func (a *App) Shutdown(ctx context.Context) error {
	first := false
	a.shutdownOnce.Do(func() {
		first = true
		close(a.shutdownStarted)
	})
	if !first {
		select {
		case <-a.shutdownDone:
			return a.shutdownErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(a.shutdownDone)
	log := a.log
	start := time.Now()
	drainCtx, flushCtx := ctx, ctx
	drainFor := time.Duration(0)
	if dl, ok := ctx.Deadline(); ok {
		total := time.Until(dl)
		tel := min(total/10, telemetryShare)
		prod := min(total/5, producerShare)
		var cancelDrain, cancelFlush context.CancelFunc
		drainCtx, cancelDrain = context.WithDeadline(ctx, dl.Add(-tel-prod))
		defer cancelDrain()
		flushCtx, cancelFlush = context.WithDeadline(ctx, dl.Add(-tel))
		defer cancelFlush()
		drainFor = total - tel - prod
	}
	log.Info("draining", "streams", a.ingress.Active(), "egressStreams", a.egress.Active(), "drainTimeout", drainFor.Round(time.Millisecond).String())
	a.draining.Store(true)
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		_ = a.data.Shutdown(drainCtx) // closes the listener now; waits for idle connections
	}()
	egressErr := make(chan error, 1)
	go func() { egressErr <- a.egress.Drain(drainCtx) }()
	ingressErr := a.ingress.Drain(drainCtx)
	if ingressErr != nil {
		log.Warn("drain timeout reached; unsettled records were answered as unknown", "drainTimeout", drainFor.String())
	}
	err := errors.Join(ingressErr, <-egressErr)
	<-shut // returns by drainCtx's end
	a.close(ctx, flushCtx, log, start)
	if cerr := ctx.Err(); cerr != nil && err == nil {
		err = cerr
	}
	a.shutdownErr = err
	return err
}

// The shares of a Shutdown's time kept, at most, for the producers' flush after the
// drain and for the telemetry's after that (see Shutdown).
const (
	producerShare  = 2 * time.Second
	telemetryShare = time.Second
)

// closeGrace bounds the producers' flush in Close (which has no deadline of its own).
const closeGrace = 2 * time.Second

// Close closes the bridge at once: listeners and connections, producers (what they hold
// gets closeGrace to flush), the Pulsar client, telemetry (a second). It does not drain;
// after a Shutdown it does nothing.
func (a *App) Close() error {
	first := false
	a.shutdownOnce.Do(func() {
		first = true
		close(a.shutdownStarted)
	})
	if !first {
		<-a.shutdownDone
		return nil
	}
	defer close(a.shutdownDone)
	a.draining.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace+telemetryShare)
	defer cancel()
	flushCtx, cancelFlush := context.WithTimeout(ctx, closeGrace)
	defer cancelFlush()
	a.close(ctx, flushCtx, a.log, time.Now())
	return nil
}

// close is the end of every shutdown: whatever is still open is closed. The producers
// flush until flushCtx ends, the telemetry until ctx does; nothing waits past ctx.
func (a *App) close(ctx, flushCtx context.Context, log *slog.Logger, start time.Time) {
	_ = a.data.Close() // the remaining connections, whatever their handlers do
	a.stopWatch()
	a.budget.Close() // a record or delivery still waiting for room gives up
	a.prods.CloseContext(flushCtx)
	if flushCtx.Err() != nil {
		log.Warn("producers did not flush in time; what they held was failed and their connections closed")
	}
	// Every producer is closed; the consumers' closes are cut with the producers' share,
	// so the telemetry keeps its own.
	_ = a.client.CloseContext(flushCtx)
	if a.oauth2 != nil {
		a.oauth2.Close()
	}
	_ = a.ops.Close()
	a.serving.Wait() // the Serve loops return once their listeners are closed; the watcher once stopped
	_ = a.metrics.Shutdown(ctx)
	_ = a.tracing.Shutdown(ctx)
	log.Info("bridge stopped", "took", time.Since(start).Round(time.Millisecond).String())
}

func (a *App) shutdownTracing() {
	sctx, cancel := context.WithTimeout(context.Background(), telemetryShare)
	defer cancel()
	_ = a.tracing.Shutdown(sctx)
}

// Reload re-reads the configuration and swaps it in if it is valid; why names the
// trigger in the log. A bad file keeps the current configuration, and its problem is
// returned and shown by /readyz until a reload succeeds.
func (a *App) Reload(why string) error {
	a.reload.Lock()
	defer a.reload.Unlock()
	raw, err := os.ReadFile(a.path)
	cur := a.snap.Load()
	if err == nil && bytes.Equal(raw, cur.raw) && a.lastErr.Load() == nil {
		a.metrics.Reload("unchanged")
		return nil
	}
	// The same bytes as the running configuration after a refused file are a reload too
	// (the usual way to undo a bad ConfigMap): applied again, clearing lastReloadError.
	var next *snapshot
	if err == nil {
		next, err = check(a.path, raw, false)
	} else {
		err = fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	if err != nil {
		msg := err.Error()
		a.lastErr.Store(&msg)
		a.metrics.Reload("invalid")
		a.log.Error("configuration reload refused; the previous configuration stays in effect", "trigger", why, "error", msg)
		return err
	}
	for _, line := range config.RestartNeeded(a.running, next.cfg) {
		a.log.Warn("configuration change needs a restart", "change", line)
	}
	a.snap.Store(next)
	a.ingress.Update(next.table, next.auth, limitsOf(next.cfg))
	a.egress.Update(next.table, next.auth, egressLimitsOf(next.cfg))
	a.lastErr.Store(nil)
	a.metrics.Reload("applied")
	a.log.Info("configuration reloaded", "trigger", why, "routes", len(next.table.Routes()))
	return nil
}

// readiness is /readyz's verdict and the details its body shows (detail["broker"] is
// "connected" when the broker's handshake succeeded within 2s).
func (a *App) readiness(ctx context.Context) (bool, map[string]any) {
	snap := a.snap.Load()
	detail := map[string]any{"config": a.path, "configLoaded": snap.loaded.UTC().Format(time.RFC3339), "routes": len(snap.table.Routes()),
		"streams": a.ingress.Active(), "egressStreams": a.egress.Active()}
	if p := a.lastErr.Load(); p != nil {
		detail["lastReloadError"] = *p
	}
	if a.budget != nil {
		st := a.budget.Stats()
		detail["memoryBudget"] = map[string]int64{"limit": st.Limit, "used": st.Used, "peak": st.Peak, "waits": st.Waits}
	}
	detail["producers"] = a.prods.Live()
	ready := true
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	switch err := a.client.Ping(ctx); {
	case err == nil:
		detail["broker"] = "connected"
	case errors.Is(err, pulsar.ErrHandshake) && pulsar.IsRetryable(err):
		ready = false
		detail["broker"] = "refusing the bridge's credentials, retried with backoff (records get 503 meanwhile): " + err.Error()
	default:
		ready = false
		detail["broker"] = "unreachable: " + err.Error()
	}
	if rs := a.client.HandshakeRefusals(); len(rs) > 0 {
		// Any broker refusing CONNECT, the service URL's or the one a topic lives on:
		// what is published there gets 503 while it lasts (an AuthenticationError is
		// retried; the others need the configuration changed).
		refusals := make([]map[string]any, 0, len(rs))
		for _, r := range rs {
			refusals = append(refusals, map[string]any{"broker": r.Addr, "since": r.Since.UTC().Format(time.RFC3339),
				"last": r.Last.UTC().Format(time.RFC3339), "refusals": r.Count, "error": r.Err.Error()})
		}
		detail["brokerHandshakeRefused"] = refusals
	}
	if !a.authReady(detail) {
		ready = false
	}
	identityProvidersDetail(snap.auth, detail)
	if a.draining.Load() {
		ready = false
		detail["draining"] = true
	}
	detail["ready"] = ready
	return ready, detail
}

// opsHandler serves /healthz, /readyz and /metrics.
func (a *App) opsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ready, detail := a.readiness(r.Context())
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(detail)
	})
	mux.Handle("GET /metrics", a.metrics.Handler())
	// Profiles only while listen.pprof is on (checked per request, so a reload turns
	// them on or off); off, the paths are 404 like any unknown one.
	pprofOn := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !a.snap.Load().cfg.Listen.Pprof {
				http.NotFound(w, r)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("/debug/pprof/", pprofOn(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", pprofOn(pprof.Cmdline))
	mux.HandleFunc("/debug/pprof/profile", pprofOn(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", pprofOn(pprof.Symbol))
	mux.HandleFunc("/debug/pprof/trace", pprofOn(pprof.Trace))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closeIfBody(r, w.Header())
		mux.ServeHTTP(w, r)
	})
}

// closeIfBody ends an HTTP/1.x connection after the answer to a request that carries a
// body nobody reads (every request the operations listener serves, and the data
// listener's refusals of other methods): net/http would otherwise wait, without a
// deadline, for that body before answering, so a client announcing one and never
// sending it would hold the connection past every server timeout.
func closeIfBody(r *http.Request, h http.Header) {
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		h.Set("Connection", "close")
	}
}
