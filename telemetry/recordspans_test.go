package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// captureClient is an otlptrace.Client that keeps what it is given as a collector would
// decode it (the record spans reuse their buffers), and can be held shut.
type captureClient struct {
	mu    sync.Mutex
	got   []*tracepb.ResourceSpans
	gate  chan struct{} // when set, uploads wait for it to close
	calls int
	err   error
}

func (c *captureClient) Start(context.Context) error { return nil }
func (c *captureClient) Stop(context.Context) error  { return nil }
func (c *captureClient) UploadTraces(ctx context.Context, rs []*tracepb.ResourceSpans) error {
	c.mu.Lock()
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	for _, r := range rs {
		// Through the wire, as a collector sees it.
		b, err := proto.Marshal(r)
		if err != nil {
			return err
		}
		var back tracepb.ResourceSpans
		if err := proto.Unmarshal(b, &back); err != nil {
			return err
		}
		c.got = append(c.got, &back)
	}
	return c.err
}

func (c *captureClient) spans() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, r := range c.got {
		for _, ss := range r.ScopeSpans {
			out = append(out, ss.Spans...)
		}
	}
	return out
}

var _ otlptrace.Client = (*captureClient)(nil)

func testOptions() recordSpanOptions {
	return recordSpanOptions{maxQueue: 64, maxBatch: 16, delay: time.Hour, timeout: time.Second}
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = fmt.Sprint(v.IntValue)
		default:
			m[kv.Key] = fmt.Sprint(v)
		}
	}
	return m
}

// sdkTracer is an SDK tracer exporting synchronously to a capture client.
func sdkTracer(t *testing.T, res *resource.Resource) (trace.Tracer, *captureClient) {
	c := &captureClient{}
	exp, err := otlptrace.New(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer(instrumentationName), c
}

// TestRecordSpansMatchTheSDKs makes the same publish span through the OpenTelemetry SDK
// (and its OTLP transform) and through RecordSpans, and compares the OTLP messages.
func TestRecordSpansMatchTheSDKs(t *testing.T) {
	ctx := context.Background()
	res := resource.NewSchemaless()
	tracer, sdkClient := sdkTracer(t, res)
	ts, _ := trace.ParseTraceState("vendor=x")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
		TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	sctx, stream := tracer.Start(trace.ContextWithRemoteSpanContext(ctx, remote), "POST mesos")
	parent := stream.SpanContext()

	ours := &captureClient{}
	rs := newRecordSpans(ours, res, "v1", testOptions())
	defer rs.Shutdown(ctx)

	for _, fail := range []error{nil, errors.New("broker said no")} {
		// Through the SDK, as ingress did before RecordSpans.
		_, sdkSpan := tracer.Start(sctx, "publish persistent://public/default/t", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(AttrSystemPulsar, AttrOpPublish, AttrDestination("persistent://public/default/t"), AttrBodySize(42)))
		if fail != nil {
			sdkSpan.RecordError(fail)
			sdkSpan.SetStatus(codes.Error, fail.Error())
		} else {
			sdkSpan.SetAttributes(AttrMessageID("12:34:-1:0"))
		}
		sdkSpan.End()
		// Through RecordSpans.
		props := map[string]string{}
		s := rs.Start(NewParent(parent), "persistent://public/default/t", 42, time.Now(), props)
		id := "12:34:-1:0"
		if fail != nil {
			id = ""
		}
		rs.End(&s, id, fail)
		if err := rs.ForceFlush(ctx); err != nil {
			t.Fatal(err)
		}
		// The message carries the span's context.
		back := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier(props)))
		if back.TraceID() != parent.TraceID() || back.SpanID() != s.SpanContext().SpanID() || !back.IsSampled() || back.TraceState().Get("vendor") != "x" {
			t.Fatalf("properties %v carry %v, want the span's context %v", props, back, s.SpanContext())
		}
	}
	want, got := sdkClient.spans(), ours.spans()
	if len(want) != 2 || len(got) != 2 {
		t.Fatalf("%d SDK spans, %d record spans; want 2 and 2", len(want), len(got))
	}
	for i := range want {
		w, g := want[i], got[i]
		if string(g.TraceId) != string(w.TraceId) || string(g.ParentSpanId) != string(w.ParentSpanId) || len(g.SpanId) != 8 ||
			string(g.SpanId) == string(w.SpanId) {
			t.Errorf("span %d ids: trace %x parent %x span %x; the SDK's: %x %x %x", i, g.TraceId, g.ParentSpanId, g.SpanId,
				w.TraceId, w.ParentSpanId, w.SpanId)
		}
		if g.Name != w.Name || g.Kind != w.Kind || g.Flags != w.Flags || g.TraceState != w.TraceState {
			t.Errorf("span %d: name %q kind %v flags %#x state %q; the SDK's: %q %v %#x %q", i, g.Name, g.Kind, g.Flags, g.TraceState,
				w.Name, w.Kind, w.Flags, w.TraceState)
		}
		if a, b := attrMap(g.Attributes), attrMap(w.Attributes); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("span %d attributes %v; the SDK's %v", i, a, b)
		}
		if g.GetStatus().GetCode() != w.GetStatus().GetCode() || g.GetStatus().GetMessage() != w.GetStatus().GetMessage() {
			t.Errorf("span %d status %v; the SDK's %v", i, g.Status, w.Status)
		}
		if len(g.Events) != len(w.Events) {
			t.Fatalf("span %d: %d events; the SDK's %d", i, len(g.Events), len(w.Events))
		}
		for j := range w.Events {
			if g.Events[j].Name != w.Events[j].Name || fmt.Sprint(attrMap(g.Events[j].Attributes)) != fmt.Sprint(attrMap(w.Events[j].Attributes)) {
				t.Errorf("span %d event %v; the SDK's %v", i, g.Events[j], w.Events[j])
			}
		}
		if g.StartTimeUnixNano == 0 || g.EndTimeUnixNano < g.StartTimeUnixNano {
			t.Errorf("span %d times %d..%d", i, g.StartTimeUnixNano, g.EndTimeUnixNano)
		}
	}
	if s := ours.got[0].ScopeSpans[0].Scope; s.Name != instrumentationName || s.Version != "v1" {
		t.Errorf("scope %v", s)
	}
	stream.End()
}

// TestProcessSpansMatchTheSDKs does the same for egress's process span: a child of the
// message's (remote) context, linked to the response span.
func TestProcessSpansMatchTheSDKs(t *testing.T) {
	ctx := context.Background()
	res := resource.NewSchemaless()
	tracer, sdkClient := sdkTracer(t, res)
	_, get := tracer.Start(ctx, "GET tasks", trace.WithSpanKind(trace.SpanKindServer))
	defer get.End()
	// The message's context, as egress extracts it from the properties.
	ts, _ := trace.ParseTraceState("vendor=y")
	props := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{5, 6}, SpanID: trace.SpanID{7, 8}, TraceFlags: trace.FlagsSampled, TraceState: ts})), props)
	mctx := propagation.TraceContext{}.Extract(ctx, props)
	msc := trace.SpanContextFromContext(mctx)

	_, sdkSpan := tracer.Start(mctx, "process persistent://public/default/t", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.Link{SpanContext: get.SpanContext()}),
		trace.WithAttributes(AttrSystemPulsar, AttrOpProcess, AttrOperationName("process"), AttrDestination("persistent://public/default/t"),
			AttrMessageID("9:8:-1:0"), AttrBodySize(42), AttrConsumerGroup("sub")))
	sdkSpan.End()

	ours := &captureClient{}
	rs := newRecordSpans(ours, res, "v1", testOptions())
	defer rs.Shutdown(ctx)
	s := rs.StartProcess(NewParent(msc), NewLink(get.SpanContext(), "sub"), "persistent://public/default/t", 42, time.Now())
	rs.End(&s, "9:8:-1:0", nil)
	if err := rs.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	want, got := sdkClient.spans(), ours.spans()
	if len(want) != 1 || len(got) != 1 {
		t.Fatalf("%d SDK spans, %d record spans; want 1 and 1", len(want), len(got))
	}
	w, g := want[0], got[0]
	if string(g.TraceId) != string(w.TraceId) || string(g.ParentSpanId) != string(w.ParentSpanId) || g.Name != w.Name ||
		g.Kind != w.Kind || g.Flags != w.Flags || g.TraceState != w.TraceState {
		t.Errorf("process span %x/%x %q %v %#x %q; the SDK's %x/%x %q %v %#x %q", g.TraceId, g.ParentSpanId, g.Name, g.Kind, g.Flags,
			g.TraceState, w.TraceId, w.ParentSpanId, w.Name, w.Kind, w.Flags, w.TraceState)
	}
	if a, b := attrMap(g.Attributes), attrMap(w.Attributes); fmt.Sprint(a) != fmt.Sprint(b) {
		t.Errorf("attributes %v; the SDK's %v", a, b)
	}
	if len(g.Links) != 1 || len(w.Links) != 1 || string(g.Links[0].TraceId) != string(w.Links[0].TraceId) ||
		string(g.Links[0].SpanId) != string(w.Links[0].SpanId) || g.Links[0].Flags != w.Links[0].Flags {
		t.Errorf("links %v; the SDK's %v", g.Links, w.Links)
	}
}

func TestChildFollowsParentBySampler(t *testing.T) {
	for s, want := range map[string]bool{"": true, "always_on": true, "parentbased_always_on": true, "parentbased_traceidratio": true,
		"ParentBased_Always_Off": true, "traceidratio": false, "always_off": false} {
		if got := childFollowsParent(s); got != want {
			t.Errorf("OTEL_TRACES_SAMPLER=%q: %v, want %v", s, got, want)
		}
	}
}

func TestRecordSpansBatchAndFlushOnShutdown(t *testing.T) {
	c := &captureClient{}
	rs := newRecordSpans(c, resource.NewSchemaless(), "v", testOptions())
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}, TraceFlags: trace.FlagsSampled})
	const n = 40 // a full batch (16) leaves on its own; the rest may wait for the shutdown
	ids := map[string]bool{}
	for i := range n {
		s := rs.Start(NewParent(parent), fmt.Sprintf("t%d", i%3), int64(i), time.Now(), map[string]string{})
		rs.End(&s, fmt.Sprintf("1:%d:-1:0", i), nil)
		ids[fmt.Sprintf("1:%d:-1:0", i)] = true
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(c.spans()) < 16 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := len(c.spans()); got < 16 {
		t.Fatalf("%d spans exported before the shutdown; a full batch (16) should have left", got)
	}
	if err := rs.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := c.spans()
	if len(spans) != n || rs.Exported() != n {
		t.Fatalf("%d spans exported (counted %d), want %d", len(spans), rs.Exported(), n)
	}
	var names []string
	for _, s := range spans {
		id := attrMap(s.Attributes)["messaging.message.id"]
		if !ids[id] {
			t.Fatalf("span with message id %q: unknown or twice", id)
		}
		delete(ids, id)
		names = append(names, s.Name)
	}
	sort.Strings(names)
	if names[0] != "publish t0" || names[n-1] != "publish t2" {
		t.Fatalf("names %v", names)
	}
	// After the shutdown spans are dropped, not queued.
	s := rs.Start(NewParent(parent), "late", 1, time.Now(), map[string]string{})
	rs.End(&s, "x", nil)
	if rs.Dropped() != 1 {
		t.Fatalf("a span ended after the shutdown: dropped %d, want 1", rs.Dropped())
	}
}

// A stuck collector costs spans, never the records: End does not wait.
func TestRecordSpansDropWhenTheQueueIsFull(t *testing.T) {
	c := &captureClient{gate: make(chan struct{})}
	o := testOptions()
	rs := newRecordSpans(c, resource.NewSchemaless(), "v", o)
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled})
	const n = 200
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			s := rs.Start(NewParent(parent), "t", 1, time.Now(), map[string]string{})
			rs.End(&s, fmt.Sprint(i), nil)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("End blocked on a stuck exporter")
	}
	// The stuck upload holds what the queue had when the exporter took it (up to the
	// whole queue); the queue holds maxQueue more.
	if d := rs.Dropped(); d < n-2*int64(o.maxQueue) || d > n-int64(o.maxQueue) {
		t.Fatalf("dropped %d of %d with a queue of %d", d, n, o.maxQueue)
	}
	close(c.gate)
	if err := rs.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := int64(len(c.spans())); got+rs.Dropped() != n {
		t.Fatalf("exported %d + dropped %d != %d ended", got, rs.Dropped(), n)
	}
}

func TestBatchOptionsComeFromTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "100")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
	o, err := batchOptions()
	if err != nil || o.maxQueue != 100 || o.maxBatch != 4096 || o.delay != 250*time.Millisecond {
		t.Fatalf("%+v %v", o, err)
	}
	t.Setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "lots")
	if _, err := batchOptions(); err == nil || !strings.Contains(err.Error(), `OTEL_BSP_MAX_EXPORT_BATCH_SIZE "lots"`) {
		t.Fatalf("error %v does not name the variable and its value", err)
	}
}

func BenchmarkRecordSpan(b *testing.B) {
	c := &discardClient{}
	rs := newRecordSpans(c, resource.NewSchemaless(), "v", recordSpanOptions{maxQueue: 16384, maxBatch: 4096, delay: time.Second, timeout: time.Second})
	defer rs.Shutdown(context.Background())
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled})
	props := map[string]string{}
	sp := NewParent(parent)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		s := rs.Start(sp, "persistent://public/default/t", 1024, time.Now(), props)
		rs.End(&s, "123:456:-1:0", nil)
		if i%4096 == 0 {
			_ = rs.ForceFlush(context.Background()) // measure the export too, not drops
		}
	}
}

func BenchmarkSDKSpan(b *testing.B) {
	exp, _ := otlptrace.New(context.Background(), &discardClient{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(16384), sdktrace.WithMaxExportBatchSize(4096)))
	defer tp.Shutdown(context.Background())
	tracer := tp.Tracer("b")
	ctx, parent := tracer.Start(context.Background(), "stream")
	defer parent.End()
	props := PropertiesCarrier{}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		sctx, s := tracer.Start(ctx, "publish persistent://public/default/t", trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(AttrSystemPulsar, AttrOpPublish, AttrDestination("persistent://public/default/t"), AttrBodySize(1024)))
		propagation.TraceContext{}.Inject(sctx, props)
		s.SetAttributes(AttrMessageID("123:456:-1:0"))
		s.End()
		if i%4096 == 0 {
			_ = tp.ForceFlush(context.Background())
		}
	}
}

// discardClient marshals what it is given, as a real client would, and drops it.
type discardClient struct{}

func (discardClient) Start(context.Context) error { return nil }
func (discardClient) Stop(context.Context) error  { return nil }
func (discardClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	for _, r := range rs {
		if _, err := proto.Marshal(r); err != nil {
			return err
		}
	}
	return nil
}

// ParentFromProperties reads a message's context as OpenTelemetry's W3C propagator does.
func TestParentFromPropertiesAgreesWithThePropagator(t *testing.T) {
	const tid, sid = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	cases := []map[string]string{
		{"traceparent": "00-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-00"},
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "vendor=a,other=b"},
		{"traceparent": "00-" + tid + "-" + sid + "-01", "tracestate": "not a tracestate!"},
		{"traceparent": "01-" + tid + "-" + sid + "-01-extra"},
		{"traceparent": "ff-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + strings.ToUpper(tid) + "-" + sid + "-01"},
		{"traceparent": "00-00000000000000000000000000000000-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-0000000000000000-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-01x"},
		{"traceparent": "00-" + tid + "-" + sid},
		{"traceparent": "00_" + tid + "-" + sid + "-01"},
		{"traceparent": "zz-" + tid + "-" + sid + "-01"},
		{"traceparent": "00-" + tid + "-" + sid + "-0g"},
		{},
	}
	for _, props := range cases {
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(props)))
		p, sampled, ok := ParentFromProperties(props)
		if ok != want.IsValid() {
			t.Errorf("%v: ok %v, the propagator: valid %v", props, ok, want.IsValid())
			continue
		}
		if !ok {
			continue
		}
		if p.traceID != want.TraceID() || p.spanID != want.SpanID() || sampled != want.IsSampled() || !p.remote ||
			p.traceState != want.TraceState().String() {
			t.Errorf("%v: %x %x sampled %v state %q; the propagator: %v", props, p.traceID, p.spanID, sampled, p.traceState, want)
		}
	}
}
