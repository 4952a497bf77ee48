package ingress

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/mapping"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// instantPublisher persists every message at once, so a benchmark measures ingress. It
// answers with one id for all: formatting one per message made two of every record's
// allocations in -benchmem, which are the Pulsar client's (its id's string), not ingress's.
type instantPublisher struct{}

func (p *instantPublisher) PublishAsync(_ context.Context, m *Message, done func(string, error)) {
	done("1:1:-1:-1", nil)
}

func (p *instantPublisher) PublishStream(context.Context, *Message, int64, io.Reader) (string, error) {
	return "", nil
}

// BenchmarkStream is ingress's own CPU per record (HTTP in, decoding, routing, receipts,
// and the HTTP client and OTLP sink in this process) with tracing off and with 1 %, 10 %
// and 100 % of the records sampled (parentbased_traceidratio: each record a root of its
// own; spans exported over OTLP/HTTP), one 1 000 × 1 KiB stream per iteration.
func BenchmarkStream(b *testing.B) {
	sink := telemetrytest.DropSink()
	defer sink.Close()
	cfg, err := config.Parse([]byte("pulsar: {url: pulsar://127.0.0.1:6650}\nroutes:\n  - name: bench\n    default: {topic: t}\n"))
	if err != nil {
		b.Fatal(err)
	}
	tab, err := mapping.Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("a"), 1024)
	var body []byte
	const records = 1000
	for range records {
		body = recordio.AppendRecord(body, payload)
	}
	for _, mode := range []struct{ name, ratio string }{{"off", ""}, {"1pct", "0.01"}, {"10pct", "0.1"}, {"100pct", "1"}} {
		b.Run(mode.name, func(b *testing.B) {
			tr := telemetry.Disabled()
			if mode.ratio != "" {
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.URL)
				b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
				b.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
				b.Setenv("OTEL_TRACES_SAMPLER_ARG", mode.ratio)
				b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1048576") // this loop outruns any exporter: measure, don't drop
				if tr, err = telemetry.SetupTracing(context.Background(), "bench", telemetry.TracingOptions{}); err != nil {
					b.Fatal(err)
				}
				defer tr.Shutdown(context.Background())
			}
			s := New(&instantPublisher{}, nil, nil, tr)
			s.Update(tab, nil, Limits{MaxRecordBytes: 1 << 20, BufferRecordBytes: 1 << 20, MaxStreams: 10, IdleTimeout: 1 << 40,
				PendingRecords: 1000, PendingBytes: 16 << 20})
			e := echo.New()
			s.Register(e)
			srv := httptest.NewServer(e)
			defer srv.Close()
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			cpu0 := telemetrytest.ProcessCPU()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/publish/bench", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/recordio")
				req.Header.Set("Message-Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || !bytes.Contains(out, []byte(`"published":1000`)) {
					b.Fatalf("%d %s", resp.StatusCode, out)
				}
			}
			if tr.Enabled {
				_ = tr.ForceFlush(context.Background()) // the export's CPU counts too
				if mode.ratio == "1" && tr.Spans.Exported() < int64(b.N*records) {
					b.Fatalf("%d spans exported for %d records", tr.Spans.Exported(), b.N*records)
				}
			}
			// CPU rather than time: the span export runs beside the stream, on the other core.
			b.ReportMetric(float64((telemetrytest.ProcessCPU()-cpu0).Nanoseconds())/float64(b.N*records), "cpu-ns/record")
		})
	}
}
