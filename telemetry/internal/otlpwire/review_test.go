package otlpwire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// errRetriesWouldPass tells the retry budget's refusal from the export timeout's.
const retriesWouldPass = "retries would pass"

// A throttle the collector asks for that passes the retry budget fails the export at
// once, whatever its size: a Retry-After of huge numbers or a far date (which the sum
// elapsed+throttle used to overflow into a negative, so the export waited out its whole
// timeout holding the batch processor instead).
func TestHTTPHugeRetryAfterFailsAtOnce(t *testing.T) {
	for _, ra := range []string{"9223372036854775807", "9223372036", "99999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run(ra, func(t *testing.T) {
			c := newCapture(t)
			c.answer = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
				w.Header().Set("Retry-After", ra)
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return true
			}
			// The timeout is long enough that waiting it out fails the test's own deadline.
			e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry, Timeout: time.Hour})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := e.ExportSpans(ctx, oneSpan())
			if err == nil || !strings.Contains(err.Error(), retriesWouldPass) || ctx.Err() != nil {
				t.Fatalf("export answered 503 Retry-After %q: %v; want the retry budget's refusal at once", ra, err)
			}
			if n := len(c.requests()); n != 1 {
				t.Fatalf("%d requests; want 1", n)
			}
		})
	}
}

// The same for gRPC's RetryInfo, whose delay saturates at the largest Duration.
func TestGRPCHugeRetryInfoFailsAtOnce(t *testing.T) {
	g := newGRPCCapture(t)
	g.answer = func(context.Context, int) (*coltracepb.ExportTraceServiceResponse, error) {
		s, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{
			RetryDelay: durationpb.New(time.Duration(math.MaxInt64))})
		return nil, s.Err()
	}
	e := newWire(t, Config{Protocol: ProtocolGRPC, Endpoint: g.addr, Insecure: true, Retry: fastRetry, Timeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := e.ExportSpans(ctx, oneSpan())
	if err == nil || !strings.Contains(err.Error(), retriesWouldPass) || ctx.Err() != nil {
		t.Fatalf("export answered ResourceExhausted with a huge RetryInfo: %v; want the retry budget's refusal at once", err)
	}
}

// bigBatch encodes to about n MiB.
func bigBatch(n int) []sdktrace.ReadOnlySpan {
	v := strings.Repeat("v", 64<<10)
	spans := make([]sdktrace.ReadOnlySpan, 0, n*16)
	for range n * 16 {
		spans = append(spans, tracetest.SpanStub{Name: "big", Attributes: []attribute.KeyValue{attribute.String("v", v)}, Resource: resB}.Snapshot())
	}
	return spans
}

// A batch refused as too large, or one huge batch sent, does not leave its buffer with
// the exporter: the memory a request needs is held for that export only, past
// keptBufferBytes.
func TestHugeBatchBufferIsNotKept(t *testing.T) {
	c := newCapture(t)
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry, MaxRequestBytes: 8 << 20})
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	if err := e.ExportSpans(exportCtx(t), bigBatch(12)); !errors.Is(err, ErrRequestTooLarge) {
		t.Fatalf("a 12 MiB request with an 8 MiB limit: %v", err)
	}
	if c := cap(e.enc.buf); c > keptBufferBytes {
		t.Fatalf("after a refused 12 MiB request the exporter keeps a %d-byte buffer; want at most %d", c, keptBufferBytes)
	}
	if err := e.ExportSpans(exportCtx(t), bigBatch(6)); err != nil {
		t.Fatal(err)
	}
	if c := cap(e.enc.buf); c > keptBufferBytes {
		t.Fatalf("after a 6 MiB request the exporter keeps a %d-byte buffer; want at most %d", c, keptBufferBytes)
	}
	// And the buffer it keeps still encodes right.
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	got := c.requests()
	if len(got) != 3 || len(decode(t, got[1].body).ResourceSpans[0].ScopeSpans[0].Spans) != 96 ||
		decode(t, got[2].body).ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "s" {
		t.Fatalf("%d requests; want the three sent batches, intact", len(got))
	}
}

// A timeout in milliseconds too large for a Duration is refused naming the variable, not
// wrapped into a negative that New silently replaced by the 10 s default (or into some
// other positive value).
func TestFromEnvRefusesATimeoutPastDuration(t *testing.T) {
	for _, v := range []string{"10000000000000", "9223372036854775807", "9223372036855"} {
		clearOTLPEnv(t)
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", v)
		cfg, err := FromEnv()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
			t.Errorf("TIMEOUT=%s: timeout %v, error %v; want an ErrConfig naming the variable", v, cfg.Timeout, err)
		}
	}
	clearOTLPEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "9223372036854") // the largest whole milliseconds a Duration holds
	if cfg, err := FromEnv(); err != nil || cfg.Timeout != 9223372036854*time.Millisecond {
		t.Fatalf("TIMEOUT=9223372036854: %v %v", cfg.Timeout, err)
	}
}

// randomBatch encodes to about n MiB that gzip cannot shrink.
func randomBatch(n int) []sdktrace.ReadOnlySpan {
	r := rand.New(rand.NewPCG(uint64(n), 7))
	spans := make([]sdktrace.ReadOnlySpan, 0, n*16)
	for range n * 16 {
		b := make([]byte, 64<<10)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		spans = append(spans, tracetest.SpanStub{Name: "random", Attributes: []attribute.KeyValue{attribute.ByteSlice("v", b)},
			Resource: resB}.Snapshot())
	}
	return spans
}

// With gzip, the compressed copy of a huge request is not kept either: the HTTP
// transport's compression buffer keeps at most keptBufferBytes between exports.
func TestHugeGzipBufferIsNotKept(t *testing.T) {
	c := newCapture(t)
	e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry, Compression: "gzip"})
	if err := e.ExportSpans(exportCtx(t), randomBatch(12)); err != nil {
		t.Fatal(err)
	}
	if c := e.tr.(*httpTransport).gzBuf.Cap(); c > keptBufferBytes {
		t.Fatalf("after a 12 MiB gzip request the transport keeps a %d-byte buffer; want at most %d", c, keptBufferBytes)
	}
	if err := e.ExportSpans(exportCtx(t), oneSpan()); err != nil {
		t.Fatal(err)
	}
	got := c.requests()
	if len(got) != 2 || len(decode(t, got[0].body).ResourceSpans[0].ScopeSpans[0].Spans) != 192 ||
		decode(t, got[1].body).ResourceSpans[0].ScopeSpans[0].Spans[0].Name != "s" {
		t.Fatalf("%d requests; want the two sent batches, intact", len(got))
	}
}

// Encode keeps nothing of the batch it was given once it returns: not its resources
// (their attribute sets, through the grouping keys) nor its scopes, only its own buffer
// and index slices.
func TestEncodeKeepsNoResourceOrScope(t *testing.T) {
	var spans []sdktrace.ReadOnlySpan
	for i := range 20 { // past manyGroups: the map is used too
		spans = append(spans, tracetest.SpanStub{Name: "s", Resource: resource.NewSchemaless(attribute.Int("r", i%3)),
			InstrumentationScope: instrumentation.Scope{Name: fmt.Sprint("scope ", i), Attributes: attribute.NewSet(attribute.Int("a", i))}}.Snapshot())
	}
	var e Encoder
	if m := decode(t, e.Encode(spans)); len(m.ResourceSpans) != 3 {
		t.Fatalf("%d resources encoded", len(m.ResourceSpans))
	}
	for i, g := range e.scopes[:cap(e.scopes)] {
		if g.key != (groupKey{}) {
			t.Fatalf("scope group %d still holds %v after Encode returned", i, g.key.scope)
		}
	}
	for i, r := range e.resources[:cap(e.resources)] {
		if r.key != (attribute.Distinct{}) || r.res != nil {
			t.Fatalf("resource group %d still holds a resource after Encode returned", i)
		}
	}
	if len(e.byKey) != 0 {
		t.Fatalf("the scope map holds %d keys after Encode returned", len(e.byKey))
	}
	// And the next batch is grouped right with the cleared groups.
	if m := decode(t, e.Encode(spans[:5])); len(m.ResourceSpans) != 3 || len(m.ResourceSpans[0].ScopeSpans) != 2 {
		t.Fatalf("second batch: %d resources", len(m.ResourceSpans))
	}
}
