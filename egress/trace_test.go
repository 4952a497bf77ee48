package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/telemetry"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// TestProcessSpansAreSampledPerMessage: a delivered message gets a process span that
// continues the context it carries and honours its decision: a sampled context gets a
// child, an unsampled one no span, a message without one a root of its own (sampled by
// the sampler, here always). Every process span links to the stream's segment span, and
// the segment to the GET span.
func TestProcessSpansAreSampledPerMessage(t *testing.T) {
	sinkURL, exported := telemetrytest.SpanSink(t)
	cfg, err := config.Parse([]byte("pulsar: {url: pulsar://127.0.0.1:6650}\nstreams:\n  - name: s\n    topics: [t]\n    subscription: audit\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sinkURL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	tr, err := telemetry.SetupTracing(context.Background(), "test", telemetry.TracingOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := &backlog{}
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 1}, SpanID: trace.SpanID{8, 1}, TraceFlags: trace.FlagsSampled, Remote: true})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 2}, SpanID: trace.SpanID{8, 2}, Remote: true})
	for i, sc := range []trace.SpanContext{sampled, unsampled, {}} {
		props := map[string]string{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(props))
		src.msgs = append(src.msgs, &Delivery{ID: fmt.Sprintf("7:%d:-1:-1", i), Topic: "persistent://public/default/t", Properties: props, Payload: []byte("{}")})
	}
	s := New(src, nil, nil, tr)
	s.Update(tab, nil, Limits{MaxStreams: 1, WriteTimeout: 5 * time.Second})
	e := echo.New()
	e.GET("/*", s.Handle)
	srv := httptest.NewServer(e)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/streams/s", nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // the topic ends after the backlog
	resp.Body.Close()
	srv.Close()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	byName := map[string][]*tracepb.Span{}
	for _, sp := range exported() {
		byName[sp.Name] = append(byName[sp.Name], sp)
	}
	get, seg, process := byName["GET s"], byName["segment GET s"], byName["process persistent://public/default/t"]
	if len(get) != 1 || len(seg) != 1 || len(process) != 2 {
		t.Fatalf("%d GET, %d segment and %d process spans; want 1, 1 and 2 (none for the unsampled message)", len(get), len(seg), len(process))
	}
	if l := seg[0].Links; len(l) != 1 || !bytes.Equal(l[0].SpanId, get[0].SpanId) || len(seg[0].ParentSpanId) != 0 {
		t.Errorf("the segment span has parent %x and links %v; want a root linked to the GET span %x", seg[0].ParentSpanId, l, get[0].SpanId)
	}
	for _, sp := range process {
		var id, group string
		for _, kv := range sp.Attributes {
			switch kv.Key {
			case "messaging.message.id":
				id = kv.Value.GetStringValue()
			case "messaging.consumer.group.name":
				group = kv.Value.GetStringValue()
			}
		}
		tid, psid := sampled.TraceID(), sampled.SpanID()
		switch {
		case id == "7:0:-1:-1" && (!bytes.Equal(sp.TraceId, tid[:]) || !bytes.Equal(sp.ParentSpanId, psid[:])):
			t.Errorf("process span of the sampled message: trace %x parent %x, want the message's %v", sp.TraceId, sp.ParentSpanId, sampled)
		case id == "7:2:-1:-1" && len(sp.ParentSpanId) != 0:
			t.Errorf("process span of the message without a context has parent %x; want a root", sp.ParentSpanId)
		case id != "7:0:-1:-1" && id != "7:2:-1:-1":
			t.Errorf("process span for message %q", id)
		case sp.Kind != tracepb.Span_SPAN_KIND_CONSUMER || group != "audit":
			t.Errorf("process span of %s: kind %v group %q", id, sp.Kind, group)
		case len(sp.Links) != 1 || !bytes.Equal(sp.Links[0].SpanId, seg[0].SpanId) || !bytes.Equal(sp.Links[0].TraceId, seg[0].TraceId):
			t.Errorf("process span of %s: links %v, want the segment span %x", id, sp.Links, seg[0].SpanId)
		}
	}
}
