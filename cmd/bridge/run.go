package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/telemetry"
)

// snapshot is one loaded configuration: the file's bytes, the parsed values and the
// compiled routes. Snapshots are immutable and swapped whole.
type snapshot struct {
	raw    []byte
	cfg    config.Config
	table  *mapping.Table
	loaded time.Time
}

// load reads, parses, validates and compiles a configuration file: the one path shared
// by `bridge validate`, start-up and every reload.
func load(path string) (*snapshot, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	return parseSnapshot(path, raw)
}

func parseSnapshot(path string, raw []byte) (*snapshot, error) {
	cfg, err := config.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	table, err := mapping.Compile(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &snapshot{raw: raw, cfg: cfg, table: table, loaded: time.Now()}, nil
}

func limitsOf(c config.Config) ingress.Limits {
	in := c.Ingress
	return ingress.Limits{
		MaxRecordBytes: int64(in.MaxRecordBytes), BufferRecordBytes: int64(in.BufferRecordBytes), MaxStreams: in.MaxStreams,
		IdleTimeout: in.IdleTimeout.D(), PendingRecords: in.PendingRecords, PendingBytes: int64(in.PendingBytes),
	}
}

func egressLimitsOf(c config.Config) egress.Limits {
	return egress.Limits{MaxStreams: c.Egress.MaxStreams, WriteTimeout: c.Egress.WriteTimeout.D()}
}

var compressions = map[string]pulsar.Compression{
	"none": pulsar.NoCompression, "lz4": pulsar.LZ4, "zlib": pulsar.ZLib, "zstd": pulsar.ZStd, "snappy": pulsar.Snappy,
}

// bridge is a running bridge: its listeners, client, producers and current snapshot.
type bridge struct {
	path    string
	log     *slog.Logger
	running config.Config // what start-up used; fields that need a restart stay as they were
	snap    atomic.Pointer[snapshot]
	reload  sync.Mutex
	lastErr atomic.Pointer[string] // the last reload's problem, shown by /readyz

	client   *pulsar.Client
	prods    *producers
	ingress  *ingress.Server
	egress   *egress.Server
	metrics  *telemetry.Metrics
	draining atomic.Bool
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the configuration file (watched, and re-read on SIGHUP)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "bridge run: usage: bridge run -config FILE [-log-level info]")
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "bridge run: -log-level %q is not debug, info, warn or error\n", *level)
		return 2
	}
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv})))
	// OpenTelemetry's own errors (exports that failed, spans dropped) go to the same log.
	otelLog := log.With("component", "opentelemetry")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { otelLog.Warn("telemetry export problem", "error", err.Error()) }))
	snap, err := load(*path)
	if err != nil {
		log.Error("configuration refused", "error", err.Error())
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, *path, snap, log); err != nil {
		log.Error("bridge stopped", "error", err.Error())
		return 1
	}
	return 0
}

// serve runs the bridge until ctx ends, then drains and returns nil.
func serve(ctx context.Context, path string, snap *snapshot, log *slog.Logger) error {
	cfg := snap.cfg
	b := &bridge{path: path, log: log, running: cfg}
	b.snap.Store(snap)
	var err error
	if b.metrics, err = telemetry.NewMetrics(version); err != nil {
		return err
	}
	token, err := cfg.Pulsar.Token.Resolve()
	if err != nil {
		return fmt.Errorf("pulsar.token: %w", err)
	}
	copts := pulsar.ClientOptions{URL: cfg.Pulsar.URL, TLSCAFile: cfg.Pulsar.TLS.CAFile, TLSCertFile: cfg.Pulsar.TLS.CertFile,
		TLSKeyFile: cfg.Pulsar.TLS.KeyFile, TLSServerName: cfg.Pulsar.TLS.ServerName, OperationTimeout: cfg.Pulsar.OperationTimeout.D(),
		KeepAlive: cfg.Pulsar.KeepAlive.D(), Logger: log.With("component", "pulsar")}
	if f := cfg.Pulsar.Token.File(); f != "" {
		copts.TokenFile = f
	} else {
		copts.Token = token
	}
	if b.client, err = pulsar.NewClient(copts); err != nil {
		return err
	}
	defer b.client.Close()
	b.prods = newProducers(b.client, pulsar.ProducerOptions{
		SendTimeout: cfg.Ingress.PublishTimeout.D(), Compression: compressions[cfg.Pulsar.Compression],
		MaxPendingMessages: 10000, MaxPendingBytes: 64 << 20,
	}, cfg.Pulsar.OperationTimeout.D(), cfg.Pulsar.ProducerIdleTimeout.D(), log.With("component", "producers"))
	tracing, err := telemetry.SetupTracing(ctx, version)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tracing.Shutdown(sctx)
	}()
	if tracing.Enabled {
		log.Info("tracing on (OTLP)", "endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")+os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
		if err := b.metrics.ObserveSpans(tracing.Records); err != nil {
			return err
		}
	}
	b.ingress = ingress.New(b.prods, log.With("component", "ingress"), b.metrics, tracing)
	b.ingress.Update(snap.table, limitsOf(cfg))
	subs := newSubscriber(b.client)
	b.egress = egress.New(subs, log.With("component", "egress"), b.metrics, tracing)
	if err := b.metrics.ObservePulsar(func() telemetry.PulsarStats {
		s := b.prods.stats()
		subs.addStats(&s)
		return s
	}); err != nil {
		return err
	}
	b.egress.Update(snap.table, egressLimitsOf(cfg))

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		status := http.StatusInternalServerError
		var he *echo.HTTPError
		if errors.As(err, &he) {
			status = he.Code
		}
		if !c.Response().Committed {
			_ = c.JSON(status, map[string]any{"status": status, "error": err.Error()})
		}
	}
	// POST: a stream's /ack endpoint, else ingress; GET: egress streams.
	e.POST("/*", func(c echo.Context) error {
		if b.egress.IsAck(c.Request().URL.Path) {
			return b.egress.HandleAck(c)
		}
		return b.ingress.Handle(c)
	})
	e.GET("/*", b.egress.Handle)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	data := &http.Server{Handler: e, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	if cfg.Listen.TLS.CertFile != "" {
		certs, err := newCertReloader(cfg.Listen.TLS.CertFile, cfg.Listen.TLS.KeyFile, log.With("component", "tls"))
		if err != nil {
			return err
		}
		protocols.SetHTTP2(true) // negotiated by ALPN
		data.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
	} else {
		protocols.SetUnencryptedHTTP2(true) // h2c
	}
	ops := &http.Server{Handler: b.opsHandler(), ReadHeaderTimeout: 10 * time.Second}
	dataLn, err := net.Listen("tcp", cfg.Listen.Data)
	if err != nil {
		return fmt.Errorf("listen.data: %w", err)
	}
	opsLn, err := net.Listen("tcp", cfg.Listen.Ops)
	if err != nil {
		dataLn.Close()
		return fmt.Errorf("listen.ops: %w", err)
	}
	var wg sync.WaitGroup
	serveOn := func(s *http.Server, ln net.Listener, name string) {
		defer wg.Done()
		var err error
		if s.TLSConfig != nil {
			err = s.ServeTLS(ln, "", "")
		} else {
			err = s.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("listener failed", "listener", name, "error", err.Error())
		}
	}
	wg.Add(2)
	go serveOn(data, dataLn, "data")
	go serveOn(ops, opsLn, "ops")
	log.Info("bridge started", "version", version, "data", dataLn.Addr().String(), "ops", opsLn.Addr().String(),
		"pulsar", cfg.Pulsar.URL, "routes", len(snap.table.Routes()), "streams", len(snap.table.Streams()), "config", path)

	// Reloads: file changes (including ConfigMap symlink swaps) and SIGHUP.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := config.Watch(watchCtx, path, 100*time.Millisecond, func() { b.doReload("file change") }); err != nil {
			log.Warn("configuration file not watched; reload with SIGHUP", "error", err.Error())
		}
	}()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-hup:
				b.doReload("SIGHUP")
			}
		}
	}()

	<-ctx.Done()
	signal.Stop(hup)
	drainFor := b.snap.Load().cfg.Ingress.DrainTimeout.D()
	log.Info("draining", "streams", b.ingress.Active(), "drainTimeout", drainFor.String())
	b.draining.Store(true)
	start := time.Now()
	drainCtx, cancel := context.WithTimeout(context.Background(), drainFor)
	defer cancel()
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		_ = data.Shutdown(drainCtx) // no new connections; waits for handlers
	}()
	egressDone := make(chan struct{})
	go func() {
		defer close(egressDone)
		_ = b.egress.Drain(drainCtx)
	}()
	if err := b.ingress.Drain(drainCtx); err != nil {
		log.Warn("drain timeout reached; unsettled records were answered as unknown", "drainTimeout", drainFor.String())
	}
	<-egressDone
	<-shut
	_ = data.Close()
	stopWatch()
	// Whatever the producers still hold was answered already; closing flushes it,
	// bounded so the process still ends soon after the drain timeout.
	closed := make(chan struct{})
	go func() { b.prods.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(max(drainFor-time.Since(start), 0) + 5*time.Second):
		log.Warn("producers did not close in time")
	}
	octx, ocancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = ops.Shutdown(octx)
	ocancel()
	wg.Wait()
	_ = b.metrics.Shutdown(context.Background())
	log.Info("bridge stopped", "drained", time.Since(start).Round(time.Millisecond).String())
	return nil
}

// doReload re-reads the configuration and swaps it in if it is valid. A bad file keeps
// the current snapshot.
func (b *bridge) doReload(why string) {
	b.reload.Lock()
	defer b.reload.Unlock()
	raw, err := os.ReadFile(b.path)
	cur := b.snap.Load()
	if err == nil && bytes.Equal(raw, cur.raw) {
		b.metrics.Reload("unchanged")
		return
	}
	var next *snapshot
	if err == nil {
		next, err = parseSnapshot(b.path, raw)
	} else {
		err = fmt.Errorf("%w: %v", config.ErrInvalid, err)
	}
	if err != nil {
		msg := err.Error()
		b.lastErr.Store(&msg)
		b.metrics.Reload("invalid")
		b.log.Error("configuration reload refused; the previous configuration stays in effect", "trigger", why, "error", msg)
		return
	}
	for _, line := range config.RestartNeeded(b.running, next.cfg) {
		b.log.Warn("configuration change needs a restart", "change", line)
	}
	b.snap.Store(next)
	b.ingress.Update(next.table, limitsOf(next.cfg))
	b.egress.Update(next.table, egressLimitsOf(next.cfg))
	b.lastErr.Store(nil)
	b.metrics.Reload("applied")
	b.log.Info("configuration reloaded", "trigger", why, "routes", len(next.table.Routes()))
}

// opsHandler serves /healthz, /readyz and /metrics.
func (b *bridge) opsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		snap := b.snap.Load()
		detail := map[string]any{"config": b.path, "configLoaded": snap.loaded.UTC().Format(time.RFC3339), "routes": len(snap.table.Routes()),
			"streams": b.ingress.Active(), "egressStreams": b.egress.Active()}
		if p := b.lastErr.Load(); p != nil {
			detail["lastReloadError"] = *p
		}
		ready := true
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := b.client.Ping(ctx); err != nil {
			ready = false
			detail["broker"] = "unreachable: " + err.Error()
		} else {
			detail["broker"] = "connected"
		}
		if b.draining.Load() {
			ready = false
			detail["draining"] = true
		}
		detail["ready"] = ready
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(detail)
	})
	mux.Handle("GET /metrics", b.metrics.Handler())
	return mux
}
