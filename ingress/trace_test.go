package ingress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// propsPublisher persists every message at once and keeps a copy of the properties the
// producer writes: Properties, with ExtraKey's pair put in (a copy of its bytes, which
// ingress reuses).
type propsPublisher struct {
	mu    sync.Mutex
	props []map[string]string
}

func (p *propsPublisher) PublishAsync(_ context.Context, m *Message, done func(string, error)) {
	p.mu.Lock()
	c := map[string]string{}
	for k, v := range m.Properties {
		c[k] = v
	}
	if m.ExtraKey != "" {
		c[m.ExtraKey] = string(m.ExtraValue)
	}
	p.props = append(p.props, c)
	n := len(p.props)
	p.mu.Unlock()
	done(fmt.Sprintf("1:%d:-1:-1", n), nil)
}

func (p *propsPublisher) PublishStream(context.Context, *Message, int64, io.Reader) (string, error) {
	return "", nil
}

// TestRecordsAreTracedOnTheirOwn, with a sampler that samples no root: an unsampled
// record's message carries no context (its record's unsampled one with
// tracing.propagateUnsampled on); a failed record is traced all the same, linked
// to its stream's segment; a record whose route gives it the client's sampled context is
// that context's child; one given the client's unsampled context carries its own
// unsampled context, continuing the client's; the record of a single-record request is
// a child of the request's span.
func TestRecordsAreTracedOnTheirOwn(t *testing.T) {
	for _, propagate := range []bool{false, true} {
		t.Run(fmt.Sprintf("propagate unsampled %v", propagate), func(t *testing.T) {
			recordsAreTracedOnTheirOwn(t, propagate)
		})
	}
}

func recordsAreTracedOnTheirOwn(t *testing.T, propagate bool) {
	url, spans := telemetrytest.SpanSink(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
	tr, err := telemetry.SetupTracing(context.Background(), "test", telemetry.TracingOptions{PropagateUnsampled: propagate})
	if err != nil {
		t.Fatal(err)
	}
	pub := &propsPublisher{}
	s := New(pub, nil, nil, tr)
	s.Update(table(t, `
routes:
  - name: r
    namespaces: [public/default]
    default: {topic: "t-{json:n}", properties: {traceparent: "{json:tp}"}}
`), nil, limits)
	e := echo.New()
	s.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()
	post := func(body []byte, header ...string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/publish/r", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/recordio")
		req.Header.Set("Message-Content-Type", "application/json")
		if body[0] == '{' {
			req.Header.Del("Message-Content-Type")
		}
		for i := 0; i < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("%d %s", resp.StatusCode, out)
		}
	}
	client := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var body []byte
	unsampled := "00-0af7651916cd43dd8448eb211c80319d-b7ad6b7169203332-00"
	for _, r := range []string{`{"n":1}`, `{"n":2}`, `{"x":0}`, `{"n":3,"tp":"` + client + `"}`, `{"n":5,"tp":"` + unsampled + `"}`} {
		body = recordio.AppendRecord(body, []byte(r))
	}
	post(body)
	post([]byte(`{"n":4}`), "Content-Type", "application/json", "traceparent", "00-11111111111111111111111111111111-2222222222222222-01")
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	if len(pub.props) != 5 {
		t.Fatalf("%d messages published, want 5", len(pub.props))
	}
	ctxs := make([]trace.SpanContext, 5)
	for i, p := range pub.props {
		sc, ok := telemetry.ParseTraceparent(p)
		if i < 2 && !propagate {
			if len(p) != 0 {
				t.Fatalf("message %d of an unsampled record carries %v; want no context", i, p)
			}
			continue
		}
		if !ok {
			t.Fatalf("message %d carries no context: %v", i, p)
		}
		ctxs[i] = sc
	}
	if propagate && (ctxs[0].IsSampled() || ctxs[1].IsSampled() || ctxs[0].TraceID() == ctxs[1].TraceID()) {
		t.Errorf("records 1 and 2: contexts %v and %v; want two unsampled traces of their own", ctxs[0], ctxs[1])
	}
	if tid := ctxs[3].TraceID(); ctxs[3].IsSampled() || tid.String() != unsampled[3:35] || ctxs[3].SpanID().String() == unsampled[36:52] {
		t.Errorf("the record given the client's unsampled context %s carries %v; want its own unsampled context in the same trace", unsampled, ctxs[3])
	}
	byName := map[string][]*tracepb.Span{}
	for _, sp := range spans() {
		byName[sp.Name] = append(byName[sp.Name], sp)
	}
	seg := byName["segment POST r"]
	if len(seg) != 1 {
		t.Fatalf("%d segment spans; spans %v", len(seg), byName)
	}
	// Its counts: five records read, four published, one failed (the collector counts
	// them in runs: all of them before the stream's segment ends).
	counts := map[string]int64{}
	for _, kv := range seg[0].Attributes {
		counts[kv.Key] = kv.Value.GetIntValue()
	}
	if counts["bridge.segment.records"] != 5 || counts["bridge.stream.records"] != 5 || counts["bridge.stream.published"] != 4 ||
		counts["bridge.stream.failed"] != 1 {
		t.Errorf("the segment's counts %v; want 5 records, 4 published, 1 failed", counts)
	}
	var failed, child, single *tracepb.Span
	for _, sp := range append(byName["publish"], byName["publish persistent://public/default/t-3"]...) {
		switch {
		case sp.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR:
			failed = sp
		case sp.Name != "publish":
			child = sp
		}
	}
	if sp := byName["publish persistent://public/default/t-4"]; len(sp) == 1 {
		single = sp[0]
	}
	switch {
	case failed == nil || !strings.Contains(failed.Status.Message, "t-{json:n}") || len(failed.Links) != 1 ||
		!bytes.Equal(failed.Links[0].SpanId, seg[0].SpanId):
		t.Errorf("the failed record's span: %v (segment %x)", failed, seg[0].SpanId)
	case child == nil || fmt.Sprintf("%x", child.ParentSpanId) != "b7ad6b7169203331" || fmt.Sprintf("%x", child.TraceId) != "0af7651916cd43dd8448eb211c80319c":
		t.Errorf("the record with the client's context: %v", child)
	case ctxs[2].SpanID() != trace.SpanID(child.SpanId) || !ctxs[2].IsSampled():
		t.Errorf("its message carries %v, not its span's context %x", ctxs[2], child.SpanId)
	case single == nil || len(byName["POST r"]) != 1 || !bytes.Equal(single.ParentSpanId, byName["POST r"][0].SpanId):
		t.Errorf("the single record's span %v is not a child of the request's %v", single, byName["POST r"])
	case len(byName) != 5:
		t.Errorf("spans %v; want the segment, 3 publish spans (failed, client's, single) and one POST (the sampled request)", byName)
	}
}

// TestARecordGivenUpBeforeSendingIsTracedAsFailed: a record read while the stream's queue
// is full, when the client goes away, is never sent; its sampled span ends as a failure
// instead of never ending (and never being exported).
func TestARecordGivenUpBeforeSendingIsTracedAsFailed(t *testing.T) {
	url, spans := telemetrytest.SpanSink(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "10")
	tr, err := telemetry.SetupTracing(context.Background(), "test", telemetry.TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	pub := newFake()
	pub.hold = true
	s := New(pub, nil, nil, tr)
	l := limits
	l.PendingRecords = 1 // one record in the queue, one in the collector; the third waits
	s.Update(table(t, oneRoute), nil, l)
	e := echo.New()
	s.Register(e)
	srv := httptest.NewServer(e)
	var body []byte
	for _, r := range []string{`{"n":1}`, `{"n":2}`, `{"n":3}`} {
		body = recordio.AppendRecord(body, []byte(r))
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/publish/r", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	for range 2 {
		select {
		case <-pub.arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("no record reached the publisher (%d so far)", pub.queued.Load())
		}
	}
	cancel() // the client goes away while the third record waits for room
	<-done
	defer srv.Close()      // waits for the handler, after
	defer pub.releaseAll() // the held records settle
	// The third record's span is exported when the bridge gives the record up (the queue
	// stays full: nothing is released before).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, sp := range spans() {
			if sp.Name == "publish persistent://public/default/t-3" {
				if sp.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(sp.Status.Message, "canceled") {
					t.Fatalf("the third record's span: status %v", sp.Status)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the record given up before it was sent has no span")
		}
	}
}

// latencyObserver keeps the span contexts PublishLatency is given.
type latencyObserver struct {
	nopObserver
	mu  sync.Mutex
	scs []trace.SpanContext
}

func (o *latencyObserver) PublishLatency(_ string, _ time.Duration, sc trace.SpanContext) {
	o.mu.Lock()
	o.scs = append(o.scs, sc)
	o.mu.Unlock()
}

// TestPublishLatencyIsGivenTheRecordsSampledSpan: the latency of a record whose trace is
// sampled comes with its span's context (the exemplar /metrics shows), although the span
// has ended by then; an unsampled record's comes with an unsampled one.
func TestPublishLatencyIsGivenTheRecordsSampledSpan(t *testing.T) {
	url, _ := telemetrytest.SpanSink(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
	tr, err := telemetry.SetupTracing(context.Background(), "test", telemetry.TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	obs := &latencyObserver{}
	s := New(&propsPublisher{}, nil, obs, tr)
	s.Update(table(t, `
routes:
  - name: r
    default: {topic: t, properties: {traceparent: "{json:tp}"}}
`), nil, limits)
	e := echo.New()
	s.Register(e)
	srv := httptest.NewServer(e)
	defer srv.Close()
	const sampledTrace = "0af7651916cd43dd8448eb211c80319c"
	for _, rec := range []string{`{"tp":"00-` + sampledTrace + `-b7ad6b7169203331-01"}`, `{"n":2}`} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/publish/r", bytes.NewReader(recordio.AppendRecord(nil, []byte(rec))))
		req.Header.Set("Content-Type", "application/recordio")
		req.Header.Set("Message-Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("publish %s: %d", rec, resp.StatusCode)
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.scs) != 2 {
		t.Fatalf("%d latencies observed, want 2 (each record found its stream idle)", len(obs.scs))
	}
	if sc := obs.scs[0]; !sc.IsSampled() || sc.TraceID().String() != sampledTrace || !sc.SpanID().IsValid() {
		t.Errorf("the sampled record's latency came with %v; want its span in trace %s", sc, sampledTrace)
	}
	if sc := obs.scs[1]; sc.IsSampled() {
		t.Errorf("the unsampled record's latency came with a sampled context %v", sc)
	}
}
