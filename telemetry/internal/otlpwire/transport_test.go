package otlpwire

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var fastRetry = Retry{Enabled: true, InitialInterval: time.Millisecond, MaxInterval: 5 * time.Millisecond, MaxElapsedTime: time.Minute}

func oneSpan() []sdktrace.ReadOnlySpan {
	return []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: "s", Resource: resB}.Snapshot()}
}

func newWire(t *testing.T, cfg Config) *Exporter {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	return e
}

// A 503 with Retry-After is retried no sooner than it says; then the export succeeds.
func TestHTTPRetriesHonouringRetryAfter(t *testing.T) {
	c := newCapture(t)
	var times []time.Time
	c.answer = func(w http.ResponseWriter, _ *http.Request, n int) bool {
		times = append(times, time.Now())
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	}
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry})
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	got := c.requests()
	if len(got) != 2 {
		t.Fatalf("%d requests, want the refused one and its retry", len(got))
	}
	if gap := times[1].Sub(times[0]); gap < time.Second {
		t.Fatalf("retried after %v; Retry-After said 1s", gap)
	}
	if !proto.Equal(decode(t, got[0].body), decode(t, got[1].body)) {
		t.Fatal("the retry sent another body")
	}
}

// Each of the official exporter's temporary statuses is retried; a Retry-After longer
// than the retry budget fails the export at once, as the official exporter does.
func TestHTTPTemporaryStatuses(t *testing.T) {
	for _, code := range []int{http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		c := newCapture(t)
		c.answer = func(w http.ResponseWriter, _ *http.Request, n int) bool {
			if n <= 2 {
				w.WriteHeader(code)
				return true
			}
			return false
		}
		e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry})
		if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
			t.Fatalf("%d: %v", code, err)
		}
		if n := len(c.requests()); n != 3 {
			t.Fatalf("%d: %d requests, want 3", code, n)
		}
	}
	c := newCapture(t)
	c.answer = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	}
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry})
	err := e.ExportSpans(exportCtx(t), oneSpan())
	if err == nil || !strings.Contains(err.Error(), "429") {
		t.Fatalf("export error %v, want the 429", err)
	}
	if n := len(c.requests()); n != 1 {
		t.Fatalf("%d requests; a throttle past the budget is not waited for", n)
	}
}

// A 400 is final: one request, and the error says the status and the collector's text.
func TestHTTPPermanentFailureIsNotRetried(t *testing.T) {
	c := newCapture(t)
	c.answer = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		http.Error(w, "malformed spans", http.StatusBadRequest)
		return true
	}
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry})
	err := e.ExportSpans(exportCtx(t), oneSpan())
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "malformed spans") {
		t.Fatalf("export error %v", err)
	}
	if n := len(c.requests()); n != 1 {
		t.Fatalf("%d requests, want 1", n)
	}
}

// hang makes the collector hold every request until the test ends; arrived gets one
// value per request, once it has been read.
func hang(t *testing.T, c *capture) <-chan struct{} {
	arrived := make(chan struct{}, 16)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	c.answer = func(w http.ResponseWriter, r *http.Request, _ int) bool {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	return arrived
}

// An export to a collector that never answers ends at the export timeout.
func TestHTTPExportTimeout(t *testing.T) {
	c := newCapture(t)
	hang(t, c)
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Timeout: 100 * time.Millisecond, Retry: fastRetry})
	done := make(chan error, 1)
	go func() { done <- e.ExportSpans(context.Background(), oneSpan()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "export timeout") {
			t.Fatalf("export error %v, want the export timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the export outlived its timeout")
	}
}

// Shutdown during an export the collector never answers: it waits until its ctx ends,
// then cuts the export; both return, and no goroutine is left (TestMain's goleak).
func TestShutdownDuringHungExport(t *testing.T) {
	for _, proto := range []Protocol{ProtocolHTTP, ProtocolGRPC} {
		t.Run(string(proto), func(t *testing.T) {
			var cfg Config
			var arrived <-chan struct{}
			if proto == ProtocolHTTP {
				c := newCapture(t)
				arrived = hang(t, c)
				cfg = Config{Protocol: proto, Endpoint: c.url(), Timeout: time.Hour, Retry: fastRetry}
			} else {
				g := newGRPCCapture(t)
				ch := make(chan struct{}, 16)
				g.answer = func(ctx context.Context, _ int) (*coltracepb.ExportTraceServiceResponse, error) {
					ch <- struct{}{}
					<-ctx.Done()
					return nil, ctx.Err()
				}
				arrived = ch
				cfg = Config{Protocol: proto, Endpoint: g.addr, Insecure: true, Timeout: time.Hour, Retry: fastRetry}
			}
			e, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- e.ExportSpans(context.Background(), oneSpan()) }()
			select {
			case <-arrived:
			case <-time.After(20 * time.Second):
				t.Fatal("the request never reached the collector")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			if err := e.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Shutdown: %v, want its ctx's deadline", err)
			}
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the cut export reported success")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the export outlived Shutdown")
			}
			if err := e.ExportSpans(context.Background(), oneSpan()); !errors.Is(err, ErrShutdown) {
				t.Fatalf("export after Shutdown: %v", err)
			}
		})
	}
}

// Headers from OTEL_EXPORTER_OTLP_TRACES_HEADERS (over the generic ones) reach the
// collector, URL-decoded, over HTTP and as gRPC metadata.
func TestHeadersFromEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "generic=1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "api-key=se%20cret, tenant=t1")
	base, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	c := newCapture(t)
	cfg := base
	cfg.Protocol, cfg.Endpoint = ProtocolHTTP, c.url()
	e := newWire(t, cfg)
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	h := c.requests()[0].header
	if h.Get("Api-Key") != "se cret" || h.Get("Tenant") != "t1" || h.Get("Generic") != "" {
		t.Fatalf("headers %v", h)
	}
	g := newGRPCCapture(t)
	var md metadata.MD
	g.answer = func(ctx context.Context, _ int) (*coltracepb.ExportTraceServiceResponse, error) {
		md, _ = metadata.FromIncomingContext(ctx)
		return &coltracepb.ExportTraceServiceResponse{}, nil
	}
	cfg = base
	cfg.Protocol, cfg.Endpoint, cfg.Insecure = ProtocolGRPC, g.addr, true
	ge := newWire(t, cfg)
	if err := ge.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	if v := md.Get("api-key"); len(v) != 1 || v[0] != "se cret" {
		t.Fatalf("metadata %v", md)
	}
}

// gzip: the body is compressed (Content-Encoding: gzip) and decodes to the same request
// as the official exporter's; over gRPC the collector decompresses it as well.
func TestGzip(t *testing.T) {
	c := newCapture(t)
	p := newHTTPPair(t, c)
	gz := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Compression: "gzip"})
	p.wire = gz
	spans := stubSpans(t)
	off, wire := bodiesHTTP(t, c, p, spans)
	requireEqual(t, off, wire)
	if err := gz.ExportSpans(exportCtx(t), spans); err != nil {
		t.Fatal(err)
	}
	if enc := c.requests()[0].header.Get("Content-Encoding"); enc != "gzip" {
		t.Fatalf("Content-Encoding %q", enc)
	}
	g := newGRPCCapture(t)
	gp := newGRPCPair(t, g)
	gp.wire = newWire(t, Config{Protocol: ProtocolGRPC, Endpoint: g.addr, Insecure: true, Compression: "gzip"})
	off, wire = bodiesGRPC(t, g, gp, spans)
	requireEqual(t, off, wire)
}

// gRPC: Unavailable is retried; ResourceExhausted only with RetryInfo; InvalidArgument
// is final.
func TestGRPCRetries(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     func() error
		retried bool
	}{
		{"unavailable", func() error { return status.Error(codes.Unavailable, "later") }, true},
		{"exhausted-with-retryinfo", func() error {
			s, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Millisecond)})
			return s.Err()
		}, true},
		{"exhausted", func() error { return status.Error(codes.ResourceExhausted, "no") }, false},
		{"invalid", func() error { return status.Error(codes.InvalidArgument, "no") }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGRPCCapture(t)
			g.answer = func(_ context.Context, n int) (*coltracepb.ExportTraceServiceResponse, error) {
				if n == 1 {
					return nil, c.err()
				}
				return &coltracepb.ExportTraceServiceResponse{}, nil
			}
			e := newWire(t, Config{Protocol: ProtocolGRPC, Endpoint: g.addr, Insecure: true, Retry: fastRetry})
			err := e.ExportSpans(exportCtx(t), oneSpan())
			n := len(g.take())
			if c.retried && (err != nil || n != 2) {
				t.Fatalf("err %v after %d requests; want success on the retry", err, n)
			}
			if !c.retried && (err == nil || n != 1) {
				t.Fatalf("err %v after %d requests; want the first refusal, not retried", err, n)
			}
		})
	}
}

// A partial success is counted and handed to otel.Handle; the export succeeds and is not
// retried.
func TestPartialSuccess(t *testing.T) {
	var handled []error
	var mu sync.Mutex
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { mu.Lock(); handled = append(handled, err); mu.Unlock() }))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 3, ErrorMessage: "too old"}})
	c := newCapture(t)
	c.answer = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
		return true
	}
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry})
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	g := newGRPCCapture(t)
	g.answer = func(context.Context, int) (*coltracepb.ExportTraceServiceResponse, error) {
		return &coltracepb.ExportTraceServiceResponse{PartialSuccess: &coltracepb.ExportTracePartialSuccess{RejectedSpans: 2}}, nil
	}
	ge := newWire(t, Config{Protocol: ProtocolGRPC, Endpoint: g.addr, Insecure: true, Retry: fastRetry})
	if err := ge.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	if len(c.requests()) != 1 || len(g.take()) != 1 || e.Rejected() != 3 || ge.Rejected() != 2 {
		t.Fatalf("rejected %d and %d", e.Rejected(), ge.Rejected())
	}
	mu.Lock()
	defer mu.Unlock()
	var ps PartialSuccess
	if len(handled) != 2 || !errors.As(handled[0], &ps) || ps.RejectedSpans != 3 || ps.ErrorMessage != "too old" {
		t.Fatalf("handled %v", handled)
	}
}

func clearOTLPEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "OTEL_EXPORTER_OTLP_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
}

// FromEnv: the official defaults, the signal's variables over the generic ones, the
// endpoint's scheme deciding TLS unless INSECURE says otherwise.
func TestFromEnvDefaultsAndPrecedence(t *testing.T) {
	clearOTLPEnv(t)
	cfg, err := FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Protocol != ProtocolGRPC || cfg.Endpoint != "localhost:4317" || cfg.Insecure || cfg.Timeout != 10*time.Second ||
		cfg.Compression != "" || cfg.Retry != DefaultRetry || cfg.TLS != nil {
		t.Fatalf("defaults %+v", cfg)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	if cfg, _ = FromEnv(); cfg.Endpoint != "https://localhost:4318/v1/traces" {
		t.Fatalf("http default endpoint %q", cfg.Endpoint)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/base")
	if cfg, _ = FromEnv(); cfg.Endpoint != "http://collector:4318/base/v1/traces" || !cfg.Insecure {
		t.Fatalf("generic endpoint %+v", cfg)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:9999")
	if cfg, _ = FromEnv(); cfg.Endpoint != "https://traces:9999/" || cfg.Insecure {
		t.Fatalf("signal endpoint %+v", cfg)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	if cfg, _ = FromEnv(); cfg.Endpoint != "http://traces:9999/" {
		t.Fatalf("INSECURE over the https scheme: %+v", cfg)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "5000")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	if cfg, _ = FromEnv(); cfg.Protocol != ProtocolGRPC || cfg.Endpoint != "traces:9999" || cfg.Timeout != 250*time.Millisecond || cfg.Compression != "gzip" {
		t.Fatalf("signal over generic %+v", cfg)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "none")
	if cfg, _ = FromEnv(); cfg.Compression != "" {
		t.Fatalf("compression %q", cfg.Compression)
	}
	// Metrics' variables are not this exporter's business.
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://elsewhere")
	if _, err := FromEnv(); err != nil {
		t.Fatal(err)
	}
}

// FromEnv refuses, naming it, a variable it does not support or a value it cannot use,
// where the official exporters log and go on without it.
func TestFromEnvRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, value string }{
		{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "udp"},
		{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "zstd"},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "10s"},
		{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "-1"},
		{"OTEL_EXPORTER_OTLP_INSECURE", "yes please"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "novalue"},
		{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "bad key=v"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1"},
		{"OTEL_EXPORTER_OTLP_CERTIFICATE", filepath.Join(dir, "missing.pem")},
		{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", notPEM},
		{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", notPEM},
		{"OTEL_EXPORTER_OTLP_TRACES_RETRY_ENABLED", "true"},
		{"OTEL_EXPORTER_OTLP_SPAN_LIMIT", "1"},
	} {
		t.Run(c.name+"="+c.value, func(t *testing.T) {
			clearOTLPEnv(t)
			t.Setenv(c.name, c.value)
			_, err := FromEnv()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.name) {
				t.Fatalf("FromEnv: %v; want an ErrConfig naming %s", err, c.name)
			}
		})
	}
}

// A batch whose request passes MaxRequestBytes is refused, not sent (the official
// exporters' limit); a smaller one goes on being sent.
func TestRequestTooLargeIsNotSent(t *testing.T) {
	c := newCapture(t)
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry, MaxRequestBytes: 1000})
	big := []sdktrace.ReadOnlySpan{tracetest.SpanStub{Name: strings.Repeat("x", 2000), Resource: resB}.Snapshot()}
	if err := e.ExportSpans(exportCtx(t), big); !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("export of a 2 KB request with a 1000-byte limit: %v", err)
	}
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	if got := c.requests(); len(got) != 1 || decode(t, got[0].body).ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "s" {
		t.Fatalf("%d requests sent; want the small batch's only", len(got))
	}
}
