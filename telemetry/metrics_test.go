package telemetry

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestMetricsReachThePrometheusHandler(t *testing.T) {
	m, err := NewMetrics(Build{Version: "v-test", Revision: "abc123"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	m.StreamStarted("mesos")
	m.RecordsSettled("mesos", 200, 3, 300)
	m.RecordsSettled("mesos", 413, 1, 5000)
	m.PublishLatency("mesos", 3*time.Millisecond, trace.SpanContext{})
	m.StreamEnded("mesos", 200)
	m.DecodeError("mesos")
	m.Reload("invalid")
	m.Nacked("out", "nack", 1)
	m.Nacked("out", "ack_timeout", 12)
	m.DeadLettered("out", true)
	m.DeadLettered("out", false)
	m.RateLimited("out", 1500*time.Millisecond)
	m.Filtered("out", 4)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`bridge_build_info{goversion="` + runtime.Version() + `",revision="abc123",version="v-test"} 1`,
		`bridge_ingress_records_total{route="mesos",status="200"} 3`,
		`bridge_ingress_records_total{route="mesos",status="413"} 1`,
		`bridge_ingress_bytes_total{route="mesos",status="200"} 300`,
		`bridge_ingress_streams_total{route="mesos",status="200"} 1`,
		`bridge_ingress_streams_active{route="mesos"} 0`,
		`bridge_ingress_decode_errors_total{route="mesos"} 1`,
		`bridge_ingress_publish_duration_seconds_bucket{route="mesos",le="0.005"} 1`,
		`bridge_config_reloads_total{result="invalid"} 1`,
		`bridge_egress_nacks_total{attempt="1",cause="nack",stream="out"} 1`,
		`bridge_egress_nacks_total{attempt="10",cause="ack_timeout",stream="out"} 1`,
		`bridge_config_reload_success 0`,
		"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_resident_memory_bytes ", "process_start_time_seconds ",
		`bridge_egress_dead_letters_total{result="ok",stream="out"} 1`,
		`bridge_egress_dead_letters_total{result="failed",stream="out"} 1`,
		`bridge_egress_rate_limited_seconds_total{stream="out"} 1.5`,
		`bridge_egress_filtered_total{stream="out"} 4`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %s", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}

func TestMetricsArePushedOverOTLPWhenAsked(t *testing.T) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/metrics" {
			posts.Add(1)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(200)
	}))
	defer srv.Close()
	t.Setenv("OTEL_METRICS_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	m, err := NewMetrics(Build{Version: "v-test", Revision: "abc123"})
	if err != nil {
		t.Fatal(err)
	}
	m.RecordsSettled("r", 200, 1, 10)
	if err := m.Shutdown(context.Background()); err != nil { // flushes the periodic reader
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no OTLP metrics export reached the collector")
	}
}

// TestMemoryBudgetOnMetrics: the memory budget's limit, use, peak and users are gauges.
func TestMemoryBudgetOnMetrics(t *testing.T) {
	m, err := NewMetrics(Build{Version: "v-test", Revision: "abc123"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	if err := m.ObserveMemory(func() MemoryStats {
		return MemoryStats{Limit: 128 << 20, Used: 7000, Peak: 9000, ConsumerQueues: 4000, ConsumerReserved: 1000, Egress: 1500, Ingress: 500}
	}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`bridge_memory_budget_limit_bytes 1.34217728e+08`,
		`bridge_memory_budget_used_bytes 7000`,
		`bridge_memory_budget_peak_bytes 9000`,
		`bridge_memory_budget_charged_bytes{user="consumer_queues"} 4000`,
		`bridge_memory_budget_charged_bytes{user="consumer_reserved"} 1000`,
		`bridge_memory_budget_charged_bytes{user="egress"} 1500`,
		`bridge_memory_budget_charged_bytes{user="ingress"} 500`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("missing %s", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}

// TestConfigReloadGaugesSayWhetherTheFileRuns: bridge_config_reload_success is 1 after
// a load, 0 after a refused reload, 1 again once one applies; the timestamp moves only
// when a configuration is applied.
func TestConfigReloadGaugesSayWhetherTheFileRuns(t *testing.T) {
	m, err := NewMetrics(Build{Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	gauges := func() (string, string) {
		t.Helper()
		body := get(t, m, "")
		ok := regexp.MustCompile(`(?m)^bridge_config_reload_success (\S+)$`).FindStringSubmatch(body)
		at := regexp.MustCompile(`(?m)^bridge_config_reload_timestamp_seconds (\S+)$`).FindStringSubmatch(body)
		if ok == nil || at == nil {
			t.Fatalf("reload gauges missing:\n%s", body)
		}
		return ok[1], at[1]
	}
	m.Loaded(time.Unix(1700000000, 0))
	if ok, at := gauges(); ok != "1" || at != "1.7e+09" {
		t.Fatalf("after the load: success %s, timestamp %s", ok, at)
	}
	m.Reload("invalid")
	if ok, at := gauges(); ok != "0" || at != "1.7e+09" {
		t.Fatalf("after a refused reload: success %s, timestamp %s", ok, at)
	}
	m.Reload("applied")
	if ok, at := gauges(); ok != "1" || at == "1.7e+09" {
		t.Fatalf("after an applied reload: success %s, timestamp %s", ok, at)
	}
}

// TestPublishLatencyCarriesTheSampledTraceAsExemplar: a scraper that negotiates
// OpenMetrics sees the trace id of a sampled publish on its latency bucket; an
// unsampled one leaves no exemplar, and the plain text format carries none.
func TestPublishLatencyCarriesTheSampledTraceAsExemplar(t *testing.T) {
	m, err := NewMetrics(Build{Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	sampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 1}, SpanID: trace.SpanID{0x00, 0xf0, 7},
		TraceFlags: trace.FlagsSampled})
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x11, 2}, SpanID: trace.SpanID{0x22, 3}})
	m.PublishLatency("mesos", 3*time.Millisecond, sampled)
	m.PublishLatency("mesos", 300*time.Millisecond, unsampled)
	om := get(t, m, "application/openmetrics-text; version=1.0.0")
	// The exemplar's labels come in no fixed order (the exporter builds them from a map):
	// either order is the same exemplar.
	bucket := `bridge_ingress_publish_duration_seconds_bucket{route="mesos",le="0.005"} 1 # `
	tid, sid := `trace_id="`+sampled.TraceID().String()+`"`, `span_id="`+sampled.SpanID().String()+`"`
	if !strings.Contains(om, bucket+"{"+tid+","+sid+"} 0.003 ") && !strings.Contains(om, bucket+"{"+sid+","+tid+"} 0.003 ") {
		t.Fatalf("no exemplar {%s,%s} 0.003 on %s in the OpenMetrics exposition:\n%s", tid, sid, bucket, om)
	}
	if strings.Contains(om, unsampled.TraceID().String()) {
		t.Fatalf("an unsampled publish left an exemplar:\n%s", om)
	}
	if text := get(t, m, ""); strings.Contains(text, sampled.TraceID().String()) {
		t.Fatalf("the text format carries exemplars:\n%s", text)
	}
}

// get scrapes m's handler, asking for the format accept names ("" the default).
func get(t *testing.T, m *Metrics, accept string) string {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, req)
	return rec.Body.String()
}

// TestDeadLetterSeriesExistFromTheStreamsStart: an egress stream's dead-letter counters
// are on /metrics at 0 before any message is dead-lettered, so increase() over them
// (BridgeDeadLettersGrowing) counts the first one.
func TestDeadLetterSeriesExistFromTheStreamsStart(t *testing.T) {
	m, err := NewMetrics(Build{Version: "v-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	m.EgressStreamStarted("out")
	body := get(t, m, "")
	for _, want := range []string{`bridge_egress_dead_letters_total{result="ok",stream="out"} 0`, `bridge_egress_dead_letters_total{result="failed",stream="out"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %s", want)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}
