package otlpwire

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// capture is an OTLP/HTTP collector that keeps each request's body and headers.
type capture struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []capturedRequest
	// answer, when set, writes the response instead of an empty 200.
	answer func(w http.ResponseWriter, r *http.Request, n int) bool
}

type capturedRequest struct {
	header http.Header
	body   []byte // decompressed
}

func newCapture(t testing.TB) *capture {
	c := &capture{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.got = append(c.got, capturedRequest{header: r.Header.Clone(), body: b})
		n := len(c.got)
		answer := c.answer
		c.mu.Unlock()
		if answer != nil && answer(w, r, n) {
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *capture) requests() []capturedRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]capturedRequest(nil), c.got...)
}

func (c *capture) take() []capturedRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	return got
}

func (c *capture) url() string { return c.srv.URL + "/v1/traces" }

// grpcCapture is an in-process OTLP gRPC collector that keeps each request.
type grpcCapture struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string
	mu   sync.Mutex
	got  []*coltracepb.ExportTraceServiceRequest
	// answer, when set, answers instead of an empty response.
	answer func(ctx context.Context, n int) (*coltracepb.ExportTraceServiceResponse, error)
}

func newGRPCCapture(t testing.TB) *grpcCapture {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &grpcCapture{addr: lis.Addr().String()}
	s := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(s, c)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(lis) }()
	t.Cleanup(func() { s.Stop(); <-done })
	return c
}

func (c *grpcCapture) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	c.got = append(c.got, req)
	n := len(c.got)
	answer := c.answer
	c.mu.Unlock()
	if answer != nil {
		return answer(ctx, n)
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *grpcCapture) take() []*coltracepb.ExportTraceServiceRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.got
	c.got = nil
	return got
}

// pair is the official exporter and the wire exporter, both sending to one collector.
type pair struct {
	official, wire sdktrace.SpanExporter
}

func newHTTPPair(t testing.TB, c *capture) pair {
	off, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(c.url()),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{Protocol: ProtocolHTTP, Endpoint: c.url()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Shutdown(context.Background()); _ = w.Shutdown(context.Background()) })
	return pair{off, w}
}

func newGRPCPair(t testing.TB, c *grpcCapture) pair {
	off, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(c.addr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(Config{Protocol: ProtocolGRPC, Endpoint: c.addr, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = off.Shutdown(context.Background()); _ = w.Shutdown(context.Background()) })
	return pair{off, w}
}

func exportCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// bodiesHTTP exports spans with both exporters and returns the two requests decoded.
func bodiesHTTP(t testing.TB, c *capture, p pair, spans []sdktrace.ReadOnlySpan) (official, wire *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	c.take()
	if err := p.official.ExportSpans(exportCtx(t), spans); err != nil {
		t.Fatalf("official exporter: %v", err)
	}
	if err := p.wire.ExportSpans(exportCtx(t), spans); err != nil {
		t.Fatalf("wire exporter: %v", err)
	}
	got := c.take()
	if len(got) != 2 {
		t.Fatalf("%d requests captured, want 2", len(got))
	}
	for _, r := range got {
		if ct := r.header.Get("Content-Type"); ct != "application/x-protobuf" {
			t.Fatalf("Content-Type %q", ct)
		}
	}
	return decode(t, got[0].body), decode(t, got[1].body)
}

func bodiesGRPC(t testing.TB, c *grpcCapture, p pair, spans []sdktrace.ReadOnlySpan) (official, wire *coltracepb.ExportTraceServiceRequest) {
	t.Helper()
	c.take()
	if err := p.official.ExportSpans(exportCtx(t), spans); err != nil {
		t.Fatalf("official exporter: %v", err)
	}
	if err := p.wire.ExportSpans(exportCtx(t), spans); err != nil {
		t.Fatalf("wire exporter: %v", err)
	}
	got := c.take()
	if len(got) != 2 {
		t.Fatalf("%d requests captured, want 2", len(got))
	}
	return got[0], got[1]
}

func decode(t testing.TB, b []byte) *coltracepb.ExportTraceServiceRequest {
	t.Helper()
	var m coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &m); err != nil {
		t.Fatalf("decoding a request body: %v", err)
	}
	return &m
}

// normalised sorts a request's ResourceSpans by their Resource and schema URL: the
// official exporter collects them in a map, so their order is random; everything inside
// one (scopes in first-seen order, spans in the order given) is deterministic in both and
// compared as it is.
func normalised(t testing.TB, m *coltracepb.ExportTraceServiceRequest) *coltracepb.ExportTraceServiceRequest {
	m = proto.Clone(m).(*coltracepb.ExportTraceServiceRequest)
	key := func(i int) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m.ResourceSpans[i].Resource)
		if err != nil {
			t.Fatal(err)
		}
		return append(b, m.ResourceSpans[i].SchemaUrl...)
	}
	keys := make([][]byte, len(m.ResourceSpans))
	for i := range keys {
		keys[i] = key(i)
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return bytes.Compare(keys[idx[a]], keys[idx[b]]) < 0 })
	sorted := m.ResourceSpans[:0:0]
	for _, i := range idx {
		sorted = append(sorted, m.ResourceSpans[i])
	}
	m.ResourceSpans = sorted
	return m
}
