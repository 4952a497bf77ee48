package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
	"github.com/recordio-bridge/bridge/telemetry/telemetrytest"
)

// startJaeger runs the Jaeger all-in-one built by e2e/jaeger/jaeger.sh and returns its
// OTLP gRPC address and query URL.
func startJaeger(t *testing.T) (otlpGRPC, query string) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("jaeger/jaeger.sh", "start", dir).Output()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "jaeger.log"))
		t.Fatalf("starting Jaeger: %v\n%s\n%s", err, exitStderr(err), log)
	}
	t.Cleanup(func() { _ = exec.Command("jaeger/jaeger.sh", "stop", dir).Run() })
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "JAEGER_OTLP_GRPC="); ok {
			otlpGRPC = v
		}
		if v, ok := strings.CutPrefix(l, "JAEGER_QUERY="); ok {
			query = v
		}
	}
	return otlpGRPC, query
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	ProcessID string `json:"processID"`
	Tags      []struct {
		Key   string `json:"key"`
		Value any    `json:"value"`
	} `json:"tags"`
}

func (s jaegerSpan) tag(k string) any {
	for _, t := range s.Tags {
		if t.Key == k {
			return t.Value
		}
	}
	return nil
}

// TestOneTraceCoversEveryHop publishes a record through ingress with a traceparent and
// reads it through egress with the same trace context, then asks a real Jaeger for the
// trace: the client span, the ingress server span, the publish span, the egress process
// span and the egress response span, parented and linked as they should be.
func TestOneTraceCoversEveryHop(t *testing.T) {
	b := broker.Get(t)
	grpcAddr, query := startJaeger(t)
	topic := b.Topic(t, "traced")
	p := startBridgeEnv(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: traced
    default: {topic: %s}
streams:
  - name: traced
    topics: [%s]
    position: earliest
    ack: client
    envelope: json
`, b.URL, topic, topic), []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + grpcAddr, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_SERVICE_NAME=bridge-e2e", "OTEL_BSP_SCHEDULE_DELAY=100", "POD_NAME=bridge-pod-0", "POD_NAMESPACE=e2e",
	})

	// The test's own tracer plays the scheduler: its span is the trace's root.
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcAddr), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	res, _ := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("scheduler-e2e")))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	defer tp.Shutdown(ctx)
	cctx, client := tp.Tracer("e2e").Start(ctx, "scheduler round trip", trace.WithSpanKind(trace.SpanKindClient))
	traceID := client.SpanContext().TraceID().String()
	headers := http.Header{}
	propagation.TraceContext{}.Inject(cctx, propagation.HeaderCarrier(headers))

	// Publish one record (streamed receipts) with the client's context.
	status, _, body := postOne(t, p.DataURL+"/v1/publish/traced", map[string]string{
		"Content-Type": "application/recordio", "Message-Content-Type": "application/json",
		"Accept": "application/recordio", "traceparent": headers.Get("traceparent")}, recordio.AppendRecord(nil, []byte(`{"type":"UPDATE"}`)))
	rs, sum := decodeStreamed(t, body)
	if status != 200 || sum.Status != 200 || len(rs) != 1 {
		t.Fatalf("publish: %d %s", status, body)
	}
	// Read it back through egress with the same context, acknowledge it, and end the stream.
	gctx, gcancel := context.WithCancel(ctx)
	resp := egressGet(t, gctx, p.DataURL+"/v1/streams/traced", map[string]string{"traceparent": headers.Get("traceparent"), "Message-Accept": "application/json"})
	rec, err := recordio.NewReader(resp.Body).Next()
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		MessageID  string            `json:"messageId"`
		Properties map[string]string `json:"properties"`
	}
	_ = json.Unmarshal(rec, &env)
	if !strings.Contains(env.Properties["traceparent"], traceID) {
		t.Fatalf("the message's properties carry no traceparent of trace %s: %v", traceID, env.Properties)
	}
	ack, _ := json.Marshal([]string{env.MessageID})
	if st, m := postAck(t, p.DataURL+"/v1/streams/traced/ack", resp.Header.Get("Stream-Id"), "application/json", ack); st != 200 {
		t.Fatalf("ack: %d %v", st, m)
	}
	gcancel()
	resp.Body.Close()
	client.End()

	// Ask Jaeger until the five spans are there.
	var spans []jaegerSpan
	deadline := time.Now().Add(30 * time.Second)
	for {
		spans = jaegerTrace(t, query, traceID)
		if len(spans) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	byName := map[string]jaegerSpan{}
	var names []string
	for _, s := range spans {
		byName[s.OperationName] = s
		names = append(names, s.OperationName)
	}
	sort.Strings(names)
	root := byName["scheduler round trip"]
	ingress := byName["POST traced"]
	publish := byName["publish "+topic]
	process := byName["process "+topic]
	response := byName["GET traced"]
	parent := func(s jaegerSpan, refType string) []string {
		var out []string
		for _, r := range s.References {
			if r.RefType == refType {
				out = append(out, r.SpanID)
			}
		}
		return out
	}
	has := func(l []string, id string) bool {
		for _, x := range l {
			if x == id {
				return true
			}
		}
		return false
	}
	switch {
	case root.SpanID == "" || ingress.SpanID == "" || publish.SpanID == "" || process.SpanID == "" || response.SpanID == "":
		t.Fatalf("trace %s has spans %v; want the client, ingress, publish, process and response spans", traceID, names)
	case !has(parent(ingress, "CHILD_OF"), root.SpanID):
		t.Fatalf("the ingress span is not a child of the client span: %+v", ingress.References)
	case !has(parent(publish, "CHILD_OF"), ingress.SpanID):
		t.Fatalf("the publish span is not a child of the ingress span: %+v", publish.References)
	case !has(parent(process, "CHILD_OF"), publish.SpanID):
		t.Fatalf("the process span does not continue the publish span (through the message's properties): %+v", process.References)
	case !has(parent(process, "FOLLOWS_FROM"), response.SpanID) && !has(parent(process, "CHILD_OF"), response.SpanID):
		t.Fatalf("the process span is not linked to the egress response span: %+v", process.References)
	case !has(parent(response, "CHILD_OF"), root.SpanID):
		t.Fatalf("the egress response span is not a child of the client span: %+v", response.References)
	case publish.tag("messaging.system") != "pulsar" || publish.tag("messaging.destination.name") != topic ||
		publish.tag("messaging.message.id") != rs[0].MessageID:
		t.Fatalf("publish span tags: %+v", publish.Tags)
	}
	// The publish and process spans went out through the per-record span queue (not the
	// SDK), and its metric says so.
	if m := scrape(t, p.OpsURL); !regexp.MustCompile(`(?m)^bridge_trace_record_spans_total\{[^}]*result="exported"[^}]*\} 2$`).MatchString(m) ||
		!regexp.MustCompile(`(?m)^bridge_trace_record_spans_total\{[^}]*result="dropped"[^}]*\} 0$`).MatchString(m) {
		t.Fatalf("bridge_trace_record_spans_total does not count 2 exported and 0 dropped spans:\n%s", m)
	}
	t.Logf("trace %s in Jaeger: %v; parent chain client -> POST -> publish -> process (via message properties), process linked to GET", traceID, names)
}

func jaegerTrace(t *testing.T, query, traceID string) []jaegerSpan {
	resp, err := http.Get(query + "/api/traces/" + traceID)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			Spans []jaegerSpan `json:"spans"`
		} `json:"data"`
	}
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &out)
	if len(out.Data) == 0 {
		return nil
	}
	return out.Data[0].Spans
}

// TestDashboardQueriesOnlyMetricsTheBridgeExposes: after traffic through every path,
// each metric the Grafana dashboard queries is on /metrics (no dead panels).
func TestDashboardQueriesOnlyMetricsTheBridgeExposes(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "dash")
	cfg := fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: dash
    default: {topic: %s}
streams:
  - name: dash
    topics: [%s]
    position: earliest
    ack: client
    envelope: json
`, b.URL, topic, topic)
	// Tracing on (to a collector that drops everything), so the span metrics exist too.
	sink := telemetrytest.DropSink()
	defer sink.Close()
	p := startBridgeEnv(t, cfg, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + sink.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"})
	h := map[string]string{"Content-Type": "application/recordio", "Message-Content-Type": "application/json", "Accept": "application/recordio"}
	postOne(t, p.DataURL+"/v1/publish/dash", h, recordio.AppendRecord(nil, []byte(`{"n":1}`)))
	postOne(t, p.DataURL+"/v1/publish/dash", h, []byte("x\n")) // a framing error
	ctx, cancel := context.WithCancel(context.Background())
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/dash", map[string]string{"Message-Accept": "application/json"})
	rec, err := recordio.NewReader(resp.Body).Next()
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		MessageID string `json:"messageId"`
	}
	_ = json.Unmarshal(rec, &env)
	ack, _ := json.Marshal([]string{env.MessageID})
	if st, _ := postAck(t, p.DataURL+"/v1/streams/dash/ack", resp.Header.Get("Stream-Id"), "application/json", ack); st != 200 {
		t.Fatalf("ack %d", st)
	}
	p.write(cfg + "\n") // a reload
	time.Sleep(500 * time.Millisecond)
	metrics := scrape(t, p.OpsURL)
	cancel()
	resp.Body.Close()

	dash, err := os.ReadFile("../k8s/dashboards/bridge.json")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range regexp.MustCompile(`bridge_[a-z_]+`).FindAllString(string(dash), -1) {
		names[m] = true
	}
	if len(names) < 10 {
		t.Fatalf("only %d metric names found in the dashboard", len(names))
	}
	var missing []string
	for n := range names {
		if !regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(metrics) {
			missing = append(missing, n)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("the dashboard queries metrics /metrics does not have: %v\n%s", missing, metrics)
	}
	t.Logf("all %d metrics the dashboard queries are exposed", len(names))
}
