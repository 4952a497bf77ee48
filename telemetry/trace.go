package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing holds the bridge's tracer and the W3C propagator. With tracing off its tracer
// is a no-op: spans cost nothing and carry no context.
type Tracing struct {
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	Enabled    bool
	// Records makes the per-record spans (nil with tracing off).
	Records *RecordSpans
	// ChildFollowsParent: the sampler decides a child span with a sampled parent as
	// sampled (parentbased_*, the default, or always_on), so a process span continuing a
	// sampled message's context can be made by Records without asking the SDK.
	ChildFollowsParent bool
	shutdown           func(context.Context) error
}

// Shutdown flushes and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Disabled is tracing off.
func Disabled() *Tracing {
	return &Tracing{Tracer: noop.NewTracerProvider().Tracer(""), Propagator: propagation.TraceContext{}}
}

// SetupTracing configures tracing from the standard OpenTelemetry environment:
//
//   - OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none: off. Tracing is on when
//     OTEL_TRACES_EXPORTER=otlp or an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), off otherwise.
//   - OTEL_EXPORTER_OTLP_PROTOCOL / OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: grpc (default) or
//     http/protobuf; endpoints, headers, timeouts and TLS from the OTEL_EXPORTER_OTLP_*
//     variables, read by the exporters themselves.
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on), read
//     by the SDK.
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the downward-API variables POD_NAME,
//     POD_NAMESPACE, NODE_NAME and CONTAINER_NAME become k8s.* resource attributes.
func SetupTracing(ctx context.Context, version string) (*Tracing, error) {
	if !tracingWanted() {
		return Disabled(), nil
	}
	proto := firstEnv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
	// One OTLP client (one connection) serves the SDK's spans and the per-record spans.
	var client otlptrace.Client
	switch proto {
	case "", "grpc":
		client = otlptracegrpc.NewClient()
	case "http/protobuf":
		client = otlptracehttp.NewClient()
	default:
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: the bridge exports traces over grpc or http/protobuf", proto)
	}
	res, err := Resource(ctx, version)
	if err != nil {
		return nil, err
	}
	bsp, err := batchOptions()
	if err != nil {
		return nil, err
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	// The SDK's spans are a few per stream; the per-record spans have a queue of their own.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	records := newRecordSpans(client, res, version, bsp)
	return &Tracing{Tracer: tp.Tracer(instrumentationName, trace.WithInstrumentationVersion(version)), Propagator: propagation.TraceContext{},
		Enabled: true, Records: records, ChildFollowsParent: childFollowsParent(os.Getenv("OTEL_TRACES_SAMPLER")),
		shutdown: func(ctx context.Context) error {
			// The record spans first: the provider's shutdown stops the shared client.
			return errors.Join(records.Shutdown(ctx), tp.Shutdown(ctx))
		}}, nil
}

// batchOptions reads the OTEL_BSP_* variables for the per-record span queue. The
// defaults are larger than the SDK's (2048 / 512): a span per record makes many spans.
func batchOptions() (recordSpanOptions, error) {
	o := recordSpanOptions{maxQueue: 16384, maxBatch: 4096, delay: 5 * time.Second, timeout: 30 * time.Second}
	for _, v := range []struct {
		env string
		n   *int
		d   *time.Duration
	}{
		{"OTEL_BSP_MAX_QUEUE_SIZE", &o.maxQueue, nil},
		{"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &o.maxBatch, nil},
		{"OTEL_BSP_SCHEDULE_DELAY", nil, &o.delay},
		{"OTEL_BSP_EXPORT_TIMEOUT", nil, &o.timeout},
	} {
		s := os.Getenv(v.env)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return o, fmt.Errorf("%s %q: want a positive integer", v.env, s)
		}
		if v.n != nil {
			*v.n = n
		} else {
			*v.d = time.Duration(n) * time.Millisecond
		}
	}
	return o, nil
}

// childFollowsParent: under sampler (OTEL_TRACES_SAMPLER), is a child of a sampled
// parent always sampled?
func childFollowsParent(sampler string) bool {
	s := strings.ToLower(strings.TrimSpace(sampler))
	return s == "" || s == "always_on" || strings.HasPrefix(s, "parentbased_")
}

func tracingWanted() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch strings.ToLower(os.Getenv("OTEL_TRACES_EXPORTER")) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// Resource describes this process: service.name (default "recordio-bridge", or
// OTEL_SERVICE_NAME), its version, OTEL_RESOURCE_ATTRIBUTES and the pod from the
// downward API.
func Resource(ctx context.Context, version string) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{semconv.ServiceName("recordio-bridge"), semconv.ServiceVersion(version)}
	for env, key := range map[string]attribute.Key{"POD_NAME": semconv.K8SPodNameKey, "POD_NAMESPACE": semconv.K8SNamespaceNameKey,
		"NODE_NAME": semconv.K8SNodeNameKey, "CONTAINER_NAME": semconv.K8SContainerNameKey} {
		if v := os.Getenv(env); v != "" {
			attrs = append(attrs, key.String(v))
		}
	}
	// Later options win: the environment overrides the defaults above.
	r, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithHost())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, err
	}
	return r, nil
}

// PropertiesCarrier carries trace context in Pulsar message properties under the keys
// OpenTelemetry's Pulsar instrumentation uses (traceparent, tracestate).
type PropertiesCarrier map[string]string

func (c PropertiesCarrier) Get(key string) string { return c[key] }
func (c PropertiesCarrier) Set(key, value string) { c[key] = value }
func (c PropertiesCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Messaging attributes of the spans the bridge makes.
var (
	AttrSystemPulsar   = semconv.MessagingSystemPulsar
	AttrOpPublish      = semconv.MessagingOperationTypeSend
	AttrOpProcess      = semconv.MessagingOperationTypeProcess
	AttrDestination    = semconv.MessagingDestinationName
	AttrMessageID      = semconv.MessagingMessageID
	AttrBodySize       = semconv.MessagingMessageBodySize
	AttrOperationName  = semconv.MessagingOperationName
	AttrConsumerGroup  = semconv.MessagingConsumerGroupName
	AttrHTTPMethod     = semconv.HTTPRequestMethodKey
	AttrHTTPRoute      = semconv.HTTPRoute
	AttrHTTPStatusCode = semconv.HTTPResponseStatusCode
)
