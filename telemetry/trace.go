package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/recordio-bridge/bridge/telemetry/internal/otlpwire"
)

// Tracing holds the bridge's tracer and the W3C propagator. With tracing off its tracer
// is a no-op, and the per-record and segment spans (records.go) cost one branch.
//
// Every span is made by the OpenTelemetry SDK's tracer, with its span limits and the
// sampler configured by OTEL_TRACES_SAMPLER, and handed to two span processors (the
// SDK's extension point): one that counts them, and otlpwire's (telemetry/internal),
// which batches and encodes each span into the OTLP request as it ends and sends it over
// OTLP/gRPC or OTLP/HTTP as the SDK's batch span processor and exporter would.
type Tracing struct {
	Tracer     trace.Tracer
	Propagator propagation.TextMapPropagator
	Enabled    bool
	// Spans counts the spans ended, exported and lost to failed exports (nil with
	// tracing off).
	Spans *SpanCounts

	sampler sdktrace.Sampler // the configured sampler (inside the provider's), asked first for each record
	// fast is the configured sampler when OTEL_TRACES_SAMPLER named it (nil for another):
	// its decision for a record is computed without asking it (sampler.go).
	fast    *fastSampler
	segment segmentOptions
	// propagateUnsampled puts unsampled records' contexts into their messages too
	// (tracing.propagateUnsampled).
	propagateUnsampled bool
	// processors are the span processors registered on provider, in its order.
	processors []sdktrace.SpanProcessor
	names      spanNames // of record spans, by topic
	// endTime is a record span's end: the SDK's own (start plus the monotonic time
	// since). Tests set another, to make the same span both ways.
	endTime  func(start time.Time) time.Time
	provider *sdktrace.TracerProvider
	cutNow   context.CancelFunc // ends every export under way or to come
}

// Shutdown flushes and stops the exporter, by ctx's end. The SDK's batch processor
// drains its queue in a goroutine of its own, whose exports are bounded by their own
// timeout only, so when ctx ends every export under way or to come is cut (a collector
// that accepts and never answers cannot keep that goroutine past ctx). Every processor
// is shut down even when ctx has ended already (the SDK would skip them then, leaving
// the batch processor's goroutine running): with the exports cut, that is prompt.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	stop := context.AfterFunc(ctx, t.cutNow)
	defer stop()
	err := t.provider.Shutdown(context.WithoutCancel(ctx))
	t.cutNow()
	if cerr := ctx.Err(); err == nil && cerr != nil {
		err = cerr
	}
	return err
}

// ForceFlush exports every span ended so far before it returns (or ctx ends).
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t.provider == nil {
		return nil
	}
	return t.provider.ForceFlush(ctx)
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
//     http/protobuf; endpoints, headers, timeouts, compression and TLS from the
//     OTEL_EXPORTER_OTLP_* variables (a variable or value the exporter cannot use is
//     refused, naming it).
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default parentbased_always_on).
//   - OTEL_BSP_* for the batching, read as the SDK's batch span processor reads them; when
//     unset the queue holds 16 384 spans and batches are up to 4 096 (the SDK's 2 048 / 512
//     are small for a span per record).
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; the downward-API variables POD_NAME,
//     POD_NAMESPACE, NODE_NAME and CONTAINER_NAME become k8s.* resource attributes.
//
// The bridge's own settings (segments, propagation of unsampled contexts)
// come from o, the configuration file's tracing section.
func SetupTracing(ctx context.Context, version string, o TracingOptions) (*Tracing, error) {
	if !tracingWanted() {
		return Disabled(), nil
	}
	sampler, seg, err := o.check()
	if err != nil {
		return nil, err
	}
	res, err := Resource(ctx, version)
	if err != nil {
		return nil, err
	}
	exp, err := otlpwire.NewFromEnv()
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	var bsp []sdktrace.BatchSpanProcessorOption
	if os.Getenv("OTEL_BSP_MAX_QUEUE_SIZE") == "" {
		bsp = append(bsp, sdktrace.WithMaxQueueSize(16384))
	}
	if os.Getenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE") == "" {
		bsp = append(bsp, sdktrace.WithMaxExportBatchSize(4096))
	}
	t := newTracing(version, res, sampler, seg, nil, exp, bsp...)
	t.propagateUnsampled = o.PropagateUnsampled
	return t, nil
}

// CheckTracing checks what SetupTracing would check of o and the environment, building
// nothing: `bridge validate` refuses what start-up would.
func CheckTracing(o TracingOptions) error {
	if !tracingWanted() {
		return nil
	}
	_, _, err := o.check()
	return err
}

// check reads the sampler and the segment settings and the exporter's variables.
func (o TracingOptions) check() (sdktrace.Sampler, segmentOptions, error) {
	if _, err := otlpwire.FromEnv(); err != nil {
		return nil, segmentOptions{}, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	sampler, err := samplerFromEnv()
	if err != nil {
		return nil, segmentOptions{}, err
	}
	seg, err := o.segment()
	if err != nil {
		return nil, segmentOptions{}, err
	}
	return sampler, seg, nil
}

// newTracing builds the SDK pipeline around exp: the counting processor, then
// otlpwire's processor when exp is its exporter (every Tracing SetupTracing makes),
// otherwise (tests) the SDK's batch span processor around exp; then observe, if not nil.
// The span limits are what the OTEL_SPAN_* variables set.
func newTracing(version string, res *resource.Resource, sampler sdktrace.Sampler, seg segmentOptions, observe sdktrace.SpanProcessor,
	exp sdktrace.SpanExporter, bsp ...sdktrace.BatchSpanProcessorOption) *Tracing {
	counts := &SpanCounts{}
	s := bridgeSampler{sampler}
	cut, cutNow := context.WithCancel(context.Background())
	var batcher sdktrace.SpanProcessor
	if sender, ok := exp.(otlpwire.Sender); ok {
		o := batchOptions(bsp)
		proc := otlpwire.NewProcessor(sender, otlpwire.ProcessorOptions{MaxQueueSize: o.MaxQueueSize, MaxExportBatchSize: o.MaxExportBatchSize,
			ScheduleDelay: o.BatchTimeout, ExportTimeout: o.ExportTimeout, Cut: cut, Exported: counts.exportDone})
		counts.dropped, counts.endedBy = proc.Dropped, proc.Ended
		batcher = proc
	} else {
		batcher = sdktrace.NewBatchSpanProcessor(countingExporter{exp, counts, cut}, bsp...)
	}
	if e, ok := exp.(*otlpwire.Exporter); ok {
		counts.rejected = e.Rejected
	}
	procs := []sdktrace.SpanProcessor{batcher}
	if counts.endedBy == nil {
		// otlpwire's processor counts the spans it is given; the SDK's does not.
		procs = []sdktrace.SpanProcessor{countEnded{counts}, batcher}
	}
	if observe != nil {
		procs = append(procs, observe)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(s), sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithRawSpanLimits(sdktrace.NewSpanLimits())}
	for _, p := range procs {
		opts = append(opts, sdktrace.WithSpanProcessor(p))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	fast, _ := sampler.(*fastSampler)
	return &Tracing{Tracer: tp.Tracer(instrumentationName, trace.WithInstrumentationVersion(version)), Propagator: propagation.TraceContext{},
		Enabled: true, Spans: counts, sampler: sampler, fast: fast, segment: seg, processors: procs, provider: tp, cutNow: cutNow}
}

const instrumentationName = "github.com/recordio-bridge/bridge"

// samplerFromEnv reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG as the SDK does,
// but fails on a value it does not know instead of falling back to the default: the
// bridge asks the same sampler for each record before it starts a span.
func samplerFromEnv() (*fastSampler, error) {
	name := strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")))
	arg := strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER_ARG"))
	ratio := 1.0
	switch name {
	case "":
		name = "parentbased_always_on"
	case "traceidratio", "parentbased_traceidratio":
		if arg != "" {
			v, err := strconv.ParseFloat(arg, 64)
			if err != nil || !(v >= 0 && v <= 1) { // NaN too: no comparison refuses it
				return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
			}
			ratio = v
		}
	}
	s, err := newSampler(name, ratio)
	if err != nil {
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio or parentbased_ one of those", name)
	}
	return s, nil
}

// segmentOptions say when a stream's segment span ends.
type segmentOptions struct {
	records  int64
	interval time.Duration
}

// batchOptions are the SDK's batch span processor's settings for bsp: the OTEL_BSP_*
// variables read as NewBatchSpanProcessor reads them (a value that is not a number, or
// not above zero, takes the default), then bsp.
func batchOptions(bsp []sdktrace.BatchSpanProcessorOption) sdktrace.BatchSpanProcessorOptions {
	env := func(name string, def int) int {
		if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
			return v
		}
		return def
	}
	o := sdktrace.BatchSpanProcessorOptions{
		MaxQueueSize:       env("OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.DefaultMaxQueueSize),
		MaxExportBatchSize: env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize),
		BatchTimeout:       time.Duration(env("OTEL_BSP_SCHEDULE_DELAY", sdktrace.DefaultScheduleDelay)) * time.Millisecond,
		ExportTimeout:      time.Duration(env("OTEL_BSP_EXPORT_TIMEOUT", sdktrace.DefaultExportTimeout)) * time.Millisecond,
	}
	if o.MaxExportBatchSize > o.MaxQueueSize {
		o.MaxExportBatchSize = min(sdktrace.DefaultMaxExportBatchSize, o.MaxQueueSize)
	}
	for _, f := range bsp {
		f(&o)
	}
	return o
}

// TracingOptions are the bridge's own tracing settings: the configuration file's tracing
// section. A zero field takes its default.
type TracingOptions struct {
	SegmentRecords     int64         // tracing.segmentRecords: 10 000
	SegmentInterval    time.Duration // tracing.segmentInterval: 1m
	PropagateUnsampled bool          // tracing.propagateUnsampled: false
}

// segment checks the segment settings and fills in the defaults.
func (o TracingOptions) segment() (segmentOptions, error) {
	s := segmentOptions{records: 10000, interval: time.Minute}
	switch {
	case o.SegmentRecords < 0:
		return s, fmt.Errorf("tracing.segmentRecords: %d must be greater than zero", o.SegmentRecords)
	case o.SegmentRecords > 0:
		s.records = o.SegmentRecords
	}
	switch {
	case o.SegmentInterval < 0:
		return s, fmt.Errorf("tracing.segmentInterval: %s must be greater than zero", o.SegmentInterval)
	case o.SegmentInterval > 0:
		s.interval = o.SegmentInterval
	}
	return s, nil
}

// Options are the settings tracing runs with, defaults filled in (the zero value with
// tracing off).
func (t *Tracing) Options() TracingOptions {
	return TracingOptions{SegmentRecords: t.segment.records, SegmentInterval: t.segment.interval, PropagateUnsampled: t.propagateUnsampled}
}

// SpanCounts counts sampled spans: ended, accepted by the exporter, and lost to failed
// exports. Ended - exported - failed is what waits in the queue or was dropped because
// the queue was full.
type SpanCounts struct {
	ended, exported, failed atomic.Int64
	// dropped and rejected read otlpwire's own counts (nil in tests that use another
	// exporter): spans its processor dropped because its queue was full, and spans
	// collectors rejected in partial successes.
	dropped, rejected func() int64
	// endedBy, when set, is otlpwire's processor's own count of the spans ended (no
	// countEnded processor then).
	endedBy func() int64
}

// Dropped is how many sampled spans were dropped because the export queue was full; ok
// is false when the span processor does not count them (the SDK's batch span processor,
// in tests).
func (c *SpanCounts) Dropped() (n int64, ok bool) {
	if c.dropped == nil {
		return 0, false
	}
	return c.dropped(), true
}

// Rejected is how many spans collectors rejected in partial successes (counted in
// Exported too: their requests were accepted); ok is false with another exporter (tests).
func (c *SpanCounts) Rejected() (n int64, ok bool) {
	if c.rejected == nil {
		return 0, false
	}
	return c.rejected(), true
}

// Ended is how many sampled spans have ended.
func (c *SpanCounts) Ended() int64 {
	if c.endedBy != nil {
		return c.endedBy()
	}
	return c.ended.Load()
}

// Exported is how many spans the exporter accepted.
func (c *SpanCounts) Exported() int64 { return c.exported.Load() }

// Failed is how many spans were lost to failed exports.
func (c *SpanCounts) Failed() int64 { return c.failed.Load() }

// countEnded is a SpanProcessor that counts sampled spans as they end.
type countEnded struct{ c *SpanCounts }

func (countEnded) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p countEnded) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		p.c.ended.Add(1)
	}
}
func (countEnded) Shutdown(context.Context) error   { return nil }
func (countEnded) ForceFlush(context.Context) error { return nil }

// exportDone counts an export of n spans that ended with err.
func (c *SpanCounts) exportDone(n int, err error) {
	if err != nil {
		c.failed.Add(int64(n))
	} else {
		c.exported.Add(int64(n))
	}
}

// countingExporter counts what its exporter accepts and what it fails to export; an
// export ends when cut does (Tracing.Shutdown's deadline passed).
type countingExporter struct {
	sdktrace.SpanExporter
	c   *SpanCounts
	cut context.Context
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(e.cut, cancel)
	defer stop()
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.c.failed.Add(int64(len(spans)))
	} else {
		e.c.exported.Add(int64(len(spans)))
	}
	return err
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
