package egress

import (
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

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/telemetry"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// backlog is a subscription holding a fixed backlog; the topic ends after it.
type backlog struct {
	msgs []*Delivery
	next int
}

func (b *backlog) Subscribe(context.Context, SubscribeOptions) (Subscription, error) {
	return &backlog{msgs: b.msgs}, nil
}

func (b *backlog) Receive(context.Context) (*Delivery, error) {
	if d, ok := b.TryReceive(); ok {
		return d, nil
	}
	return nil, ErrEndOfTopic
}

func (b *backlog) TryReceive() (*Delivery, bool) {
	if b.next == len(b.msgs) {
		return nil, false
	}
	b.next++
	return b.msgs[b.next-1], true
}

func (b *backlog) Ack(*Delivery) error           { return nil }
func (b *backlog) Nack(*Delivery, time.Duration) {}
func (b *backlog) Close() error                  { return nil }

// BenchmarkStream is egress's CPU per delivered message (the HTTP response, RecordIO,
// acks; the client reading it in this process) for 1 000 × 1 KiB messages that carry the
// context ingress gave them, with tracing off and with 1 %, 10 % and 100 % of the records
// sampled (the messages' contexts sampled at that rate; parentbased_traceidratio). Spans
// go over OTLP/HTTP to a sink in this process.
func BenchmarkStream(b *testing.B) {
	sink := telemetrytest.DropSink()
	defer sink.Close()
	cfg, err := config.Parse([]byte("pulsar: {url: pulsar://127.0.0.1:6650}\nstreams:\n  - name: s\n    topics: [t]\n"))
	if err != nil {
		b.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	payload := make([]byte, 1024)
	for _, mode := range []struct {
		name, ratio string
		every       int
	}{{"off", "", 0}, {"1pct", "0.01", 100}, {"10pct", "0.1", 10}, {"100pct", "1", 1}} {
		b.Run(mode.name, func(b *testing.B) {
			src := &backlog{}
			for i := range n {
				props := map[string]string{}
				sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, byte(i), byte(i >> 8)}, SpanID: trace.SpanID{2, byte(i)}})
				if mode.every > 0 && i%mode.every == 0 {
					sc = sc.WithTraceFlags(trace.FlagsSampled)
				}
				propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), propagation.MapCarrier(props))
				src.msgs = append(src.msgs, &Delivery{ID: fmt.Sprintf("1:%d:-1:-1", i), Topic: "persistent://public/default/t",
					Properties: props, Payload: payload, PublishTime: time.Now()})
			}
			tr := telemetry.Disabled()
			if mode.ratio != "" {
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
				b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
				b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1048576") // this loop outruns any exporter: measure, don't drop
				b.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
				b.Setenv("OTEL_TRACES_SAMPLER_ARG", mode.ratio)
				if tr, err = telemetry.SetupTracing(context.Background(), "bench", telemetry.TracingOptions{}); err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
			}
			s := New(src, nil, nil, tr)
			s.Update(tab, nil, Limits{MaxStreams: 10, WriteTimeout: 10 * time.Second})
			e := echo.New()
			e.GET("/*", s.Handle)
			srv := httptest.NewServer(e)
			defer srv.Close()
			b.SetBytes(n * 1024)
			b.ReportAllocs()
			cpu0 := telemetrytest.ProcessCPU()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/streams/s", nil)
				req.Header.Set("Accept", "application/recordio")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				got, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || got < n*1024 {
					b.Fatalf("%d, %d bytes", resp.StatusCode, got)
				}
			}
			if tr.Enabled {
				_ = tr.ForceFlush(context.Background()) // the export's CPU counts too
				if mode.ratio == "1" && tr.Spans.Exported() < int64(b.N*n) {
					b.Fatalf("%d process spans exported for %d messages", tr.Spans.Exported(), b.N*n)
				}
			}
			b.ReportMetric(float64((telemetrytest.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/msg")
		})
	}
}
