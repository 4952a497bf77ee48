package egress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/telemetry"
)

// TestProcessSpansWhicheverPathMakesThem: a delivered message that carries a sampled
// context gets a process span, child of that context and linked to the response span,
// both when telemetry.RecordSpans makes it (the default, parent-following sampler) and
// when the SDK does (traceidratio, which does not follow the parent).
func TestProcessSpansWhicheverPathMakesThem(t *testing.T) {
	var mu sync.Mutex
	var spans []*tracepb.Span
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("the bridge exported an undecodable request: %v", err)
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	cfg, err := config.Parse([]byte("pulsar: {url: pulsar://127.0.0.1:6650}\nstreams:\n  - name: s\n    topics: [t]\n    subscription: audit\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sampler, arg string
		viaRecords   bool
	}{{"parentbased_always_on", "", true}, {"traceidratio", "1", false}} {
		t.Run(c.sampler, func(t *testing.T) {
			mu.Lock()
			spans = nil
			mu.Unlock()
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
			t.Setenv("OTEL_TRACES_SAMPLER", c.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", c.arg)
			tr, err := telemetry.SetupTracing(context.Background(), "test")
			if err != nil {
				t.Fatal(err)
			}
			src := &backlog{}
			parents := map[string]trace.SpanContext{}
			for i := range 3 {
				sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, byte(i + 1)}, SpanID: trace.SpanID{8, byte(i + 1)},
					TraceFlags: trace.FlagsSampled, Remote: true})
				props := map[string]string{}
				propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(props))
				id := fmt.Sprintf("7:%d:-1:-1", i)
				parents[id] = sc
				src.msgs = append(src.msgs, &Delivery{ID: id, Topic: "persistent://public/default/t", Properties: props, Payload: []byte("{}")})
			}
			s := New(src, nil, nil, tr)
			s.Update(tab, Limits{MaxStreams: 1, WriteTimeout: 5 * time.Second})
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
			if got := tr.Records.Exported(); (got == 3) != c.viaRecords {
				t.Errorf("%d spans through RecordSpans; via RecordSpans: %v", got, c.viaRecords)
			}
			mu.Lock()
			defer mu.Unlock()
			var get *tracepb.Span
			for _, sp := range spans {
				if sp.Name == "GET s" {
					get = sp
				}
			}
			if get == nil {
				t.Fatalf("no GET span among %d", len(spans))
			}
			n := 0
			for _, sp := range spans {
				if sp.Name != "process persistent://public/default/t" {
					continue
				}
				n++
				var id, group string
				for _, kv := range sp.Attributes {
					switch kv.Key {
					case "messaging.message.id":
						id = kv.Value.GetStringValue()
					case "messaging.consumer.group.name":
						group = kv.Value.GetStringValue()
					}
				}
				p, ok := parents[id]
				tid, psid := p.TraceID(), p.SpanID()
				switch {
				case !ok:
					t.Errorf("process span for unknown message %q", id)
				case !bytes.Equal(sp.TraceId, tid[:]) || !bytes.Equal(sp.ParentSpanId, psid[:]):
					t.Errorf("process span of %s: trace %x parent %x, want the message's %v", id, sp.TraceId, sp.ParentSpanId, p)
				case sp.Kind != tracepb.Span_SPAN_KIND_CONSUMER || group != "audit":
					t.Errorf("process span of %s: kind %v group %q", id, sp.Kind, group)
				case len(sp.Links) != 1 || !bytes.Equal(sp.Links[0].SpanId, get.SpanId) || !bytes.Equal(sp.Links[0].TraceId, get.TraceId):
					t.Errorf("process span of %s: links %v, want the GET span %x", id, sp.Links, get.SpanId)
				}
			}
			if n != 3 {
				t.Fatalf("%d process spans, want 3", n)
			}
		})
	}
}
