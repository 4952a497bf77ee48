package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"
)

// Metrics holds the bridge's instruments. Its methods are safe for concurrent use and
// allocate nothing once an attribute combination has been seen.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler

	streamsActive  metric.Int64UpDownCounter
	streams        metric.Int64Counter
	records        metric.Int64Counter
	bytes          metric.Int64Counter
	decodeErrors   metric.Int64Counter
	publishLatency metric.Float64Histogram
	publishStage   metric.Float64Histogram
	reloads        metric.Int64Counter
	credsRefused   metric.Int64Counter
	egressActive   metric.Int64UpDownCounter
	egressStreams  metric.Int64Counter
	egressRecords  metric.Int64Counter
	egressBytes    metric.Int64Counter
	egressLag      metric.Float64Histogram
	egressAcks     metric.Int64Counter
	egressNacks    metric.Int64Counter // by stream, cause and attempt
	deadLetters    metric.Int64Counter // by stream and result
	rateLimited    metric.Float64Counter
	filtered       metric.Int64Counter // by stream
	ackLatency     metric.Float64Histogram
	reloadOK       metric.Int64Gauge
	reloadAt       metric.Float64Gauge

	attrs sync.Map // attrKey or stageKey -> *boundOpts
}

type attrKey struct {
	route  string
	status int
	kind   uint8
}

// Build says which build runs: bridge_build_info's labels.
type Build struct {
	Version  string // the release, or a git description
	Revision string // the commit ("" when unknown)
}

// NewMetrics creates the instruments and a Prometheus handler serving them (with the
// Go runtime's and the process's collectors), from a registry of their own (so nothing
// global is touched and tests can make several). The handler speaks OpenMetrics to a
// scraper that asks for it, and then carries exemplars: the trace of a sampled
// publish on the latency histogram's buckets.
// With OTEL_METRICS_EXPORTER=otlp the same instruments are also pushed over OTLP
// (OTEL_EXPORTER_OTLP_METRICS_PROTOCOL / OTEL_EXPORTER_OTLP_PROTOCOL: grpc or
// http/protobuf; endpoint and interval from the standard variables).
func NewMetrics(build Build) (*Metrics, error) {
	version := build.Version
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return nil, err
	}
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	opts := []sdkmetric.Option{sdkmetric.WithReader(exp)}
	if strings.EqualFold(os.Getenv("OTEL_METRICS_EXPORTER"), "otlp") && !strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		var push sdkmetric.Exporter
		switch proto := firstEnv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); proto {
		case "", "grpc":
			push, err = otlpmetricgrpc.New(context.Background())
		case "http/protobuf":
			push, err = otlpmetrichttp.New(context.Background())
		default:
			return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: the bridge exports metrics over grpc or http/protobuf", proto)
		}
		if err != nil {
			return nil, fmt.Errorf("OTLP metric exporter: %w", err)
		}
		res, err := Resource(context.Background(), version)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(push)), sdkmetric.WithResource(res))
	}
	mp := sdkmetric.NewMeterProvider(append(opts,
		sdkmetric.WithView(sdkmetric.NewView(sdkmetric.Instrument{Name: "bridge.*.duration"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
				Boundaries: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}}}),
			sdkmetric.NewView(sdkmetric.Instrument{Name: "bridge.egress.lag"},
				sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{
					Boundaries: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 3600}}})))...)
	m := &Metrics{provider: mp, handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true})}
	mt := mp.Meter("github.com/recordio-bridge/bridge")
	var errs []error
	must := func(err error) { errs = append(errs, err) }
	m.streamsActive, err = mt.Int64UpDownCounter("bridge.ingress.streams.active", metric.WithDescription("Ingress streams open now."))
	must(err)
	m.streams, err = mt.Int64Counter("bridge.ingress.streams", metric.WithDescription("Ingress streams ended, by route and final status."))
	must(err)
	m.records, err = mt.Int64Counter("bridge.ingress.records", metric.WithDescription("Ingress records settled, by route and status (200: persisted)."))
	must(err)
	m.bytes, err = mt.Int64Counter("bridge.ingress.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes of ingress records settled, by route and status."))
	must(err)
	m.decodeErrors, err = mt.Int64Counter("bridge.ingress.decode.errors", metric.WithDescription("Ingress streams ended by a RecordIO framing error."))
	must(err)
	m.publishLatency, err = mt.Float64Histogram("bridge.ingress.publish.duration", metric.WithUnit("s"), metric.WithDescription("Time from reading a record to the broker's receipt, sampled: every 8th record and every record that finds its stream idle."))
	must(err)
	m.publishStage, err = mt.Float64Histogram("bridge.ingress.stage.duration", metric.WithUnit("s"), metric.WithDescription("The publish duration's sample split by stage: read (decoding, routing, room in ingress.pendingBytes), queue (handing the record to the producer), send (to the broker's receipt), order (behind earlier receipts), write (the receipt to the client; streamed receipts only)."))
	must(err)
	m.reloads, err = mt.Int64Counter("bridge.config.reloads", metric.WithDescription("Configuration reloads, by result (applied, invalid, unchanged)."))
	must(err)
	m.egressActive, err = mt.Int64UpDownCounter("bridge.egress.streams.active", metric.WithDescription("Egress streams open now."))
	must(err)
	m.egressStreams, err = mt.Int64Counter("bridge.egress.streams", metric.WithDescription("Egress streams opened."))
	must(err)
	m.egressRecords, err = mt.Int64Counter("bridge.egress.records", metric.WithDescription("Records written and flushed to egress clients."))
	must(err)
	m.egressBytes, err = mt.Int64Counter("bridge.egress.bytes", metric.WithUnit("By"), metric.WithDescription("Payload bytes written to egress clients."))
	must(err)
	m.egressLag, err = mt.Float64Histogram("bridge.egress.lag", metric.WithUnit("s"), metric.WithDescription("Time from a message's publication to its delivery to a client (the newest record of each flush)."))
	must(err)
	m.egressAcks, err = mt.Int64Counter("bridge.egress.acks", metric.WithDescription("Messages acknowledged to the broker by egress streams."))
	must(err)
	m.egressNacks, err = mt.Int64Counter("bridge.egress.nacks", metric.WithDescription("Messages sent back for redelivery after their backoff, by cause (nack: the client's POST /nack; ack_timeout: not acknowledged within ackTimeout) and attempt (the deliveries that failed so far, 10 for 10 or more)."))
	must(err)
	m.deadLetters, err = mt.Int64Counter("bridge.egress.dead.letters", metric.WithDescription("Messages moved to a dead-letter topic after retry.maxDeliveries (result ok), or whose publication there failed (result failed: left unacknowledged, redelivered)."))
	must(err)
	m.filtered, err = mt.Int64Counter("bridge.egress.filtered", metric.WithDescription("Messages a stream's filter did not keep: acknowledged without being written."))
	must(err)
	m.rateLimited, err = mt.Float64Counter("bridge.egress.rate.limited", metric.WithUnit("s"), metric.WithDescription("Time egress streams waited for their maxRate or maxByteRate before writing a record."))
	must(err)
	m.ackLatency, err = mt.Float64Histogram("bridge.egress.ack.duration", metric.WithUnit("s"), metric.WithDescription("Time from delivery to the client's acknowledgement (ack=client)."))
	must(err)
	m.credsRefused, err = mt.Int64Counter("bridge.credentials.refused", metric.WithDescription("Changed credential files refused, the last good ones staying in use, by file: listen_tls (listen.tls), pulsar_tls (pulsar.tls: a half-written or mismatched certificate and key, a CA bundle without a certificate), pulsar_oauth2 (pulsar.oauth2.privateKey, counted at each token request that found it unusable)."))
	must(err)
	m.reloadOK, err = mt.Int64Gauge("bridge.config.reload.success", metric.WithDescription("1 when the running configuration is the file's (its last load or reload was applied, or found it unchanged), 0 after a refused reload until one succeeds."))
	must(err)
	m.reloadAt, err = mt.Float64Gauge("bridge.config.reload.timestamp", metric.WithUnit("s"), metric.WithDescription("When the running configuration was last loaded or reloaded successfully (Unix time)."))
	must(err)
	info, err := mt.Int64Gauge("bridge.build.info", metric.WithDescription("Always 1; the labels say which build runs: version, revision (the commit) and goversion."))
	must(err)
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	rev := build.Revision
	if rev == "" {
		rev = "unknown"
	}
	info.Record(context.Background(), 1, metric.WithAttributes(attribute.String("version", version),
		attribute.String("revision", rev), attribute.String("goversion", runtime.Version())))
	return m, nil
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return m.handler }

// Shutdown stops the meter provider.
func (m *Metrics) Shutdown(ctx context.Context) error { return m.provider.Shutdown(ctx) }

func (m *Metrics) opt(route string, status int, kind uint8) metric.MeasurementOption {
	return m.bound(route, status, kind).o
}

// boundOpts is a set of attributes as the options of a measurement, made once: passed
// as a slice already made (opts...), an observation allocates nothing, where one option
// passed on its own allocated a slice for it at every call.
type boundOpts struct {
	o   metric.MeasurementOption
	rec []metric.RecordOption
	add []metric.AddOption
}

func newBoundOpts(o metric.MeasurementOption) *boundOpts {
	return &boundOpts{o: o, rec: []metric.RecordOption{o}, add: []metric.AddOption{o}}
}

func (m *Metrics) bound(route string, status int, kind uint8) *boundOpts {
	k := attrKey{route, status, kind}
	if b, ok := m.attrs.Load(k); ok {
		return b.(*boundOpts)
	}
	var o metric.MeasurementOption
	if kind == 2 {
		o = metric.WithAttributeSet(attribute.NewSet(attribute.String("stream", route)))
	} else if status == 0 {
		o = metric.WithAttributeSet(attribute.NewSet(attribute.String("route", route)))
	} else {
		o = metric.WithAttributeSet(attribute.NewSet(attribute.String("route", route), attribute.String("status", strconv.Itoa(status))))
	}
	b := newBoundOpts(o)
	m.attrs.Store(k, b)
	return b
}

var bg = context.Background()

// StreamStarted counts an ingress stream in.
func (m *Metrics) StreamStarted(route string) { m.streamsActive.Add(bg, 1, m.opt(route, 0, 0)) }

// StreamEnded counts an ingress stream out with its final status.
func (m *Metrics) StreamEnded(route string, status int) {
	m.streamsActive.Add(bg, -1, m.opt(route, 0, 0))
	m.streams.Add(bg, 1, m.opt(route, status, 1))
}

// RecordsSettled counts settled records by route and status.
func (m *Metrics) RecordsSettled(route string, status int, n, bytes int64) {
	b := m.bound(route, status, 1)
	m.records.Add(bg, n, b.add...)
	m.bytes.Add(bg, bytes, b.add...)
}

// PublishLatency records one (sampled) publish latency; a sampled sc (the record's
// publish span) becomes the exemplar of its bucket.
func (m *Metrics) PublishLatency(route string, d time.Duration, sc trace.SpanContext) {
	ctx := bg
	if sc.IsSampled() {
		ctx = trace.ContextWithSpanContext(bg, sc)
	}
	m.publishLatency.Record(ctx, d.Seconds(), m.bound(route, 0, 0).rec...)
}

// PublishStage records the time one sampled record spent in one stage of its publication.
func (m *Metrics) PublishStage(route, stage string, d time.Duration) {
	m.publishStage.Record(bg, d.Seconds(), m.stageOpts(route, stage).rec...)
}

// stageOpts are the options of a route's stage.
func (m *Metrics) stageOpts(route, stage string) *boundOpts {
	k := stageKey{route, stage}
	if b, ok := m.attrs.Load(k); ok {
		return b.(*boundOpts)
	}
	b := newBoundOpts(metric.WithAttributeSet(attribute.NewSet(attribute.String("route", route), attribute.String("stage", stage))))
	m.attrs.Store(k, b)
	return b
}

type stageKey struct{ route, stage string }

// DecodeError counts a stream ended by a framing error.
func (m *Metrics) DecodeError(route string) { m.decodeErrors.Add(bg, 1, m.opt(route, 0, 0)) }

// Reload counts a configuration reload by result (applied, invalid, unchanged; the
// file found unchanged is only counted) and sets bridge_config_reload_success and,
// when applied, its timestamp.
func (m *Metrics) Reload(result string) {
	m.reloads.Add(bg, 1, metric.WithAttributes(attribute.String("result", result)))
	switch result {
	case "invalid":
		m.reloadOK.Record(bg, 0)
	case "applied":
		m.Loaded(time.Now())
	}
}

// CredentialsRefused counts changed credential files refused (the last good ones stay
// in use); file is listen_tls, pulsar_tls or pulsar_oauth2.
func (m *Metrics) CredentialsRefused(file string) {
	m.credsRefused.Add(bg, 1, metric.WithAttributes(attribute.String("file", file)))
}

// Loaded says the running configuration was loaded from the file at t.
func (m *Metrics) Loaded(t time.Time) {
	m.reloadOK.Record(bg, 1)
	m.reloadAt.Record(bg, float64(t.UnixNano())/1e9)
}

// PulsarStats are the client's figures at one instant, summed over producers and
// consumers; counters only grow (what closed objects counted is kept).
type PulsarStats struct {
	PendingMessages, PendingBytes int64 // producers: awaiting receipts
	ProducerReconnects            int64
	ConsumerReconnects            int64
	PermitsGranted                int64 // FLOW permits sent by egress consumers
	Buffered                      int64 // messages in egress consumers' receiver queues
	Corrupt, Malformed            int64 // messages egress consumers discarded: bad checksum, metadata that does not validate
	// ChunkedDropped: chunked messages egress consumers dropped before they were whole
	// (expired, or pushed out by streams[].maxPendingChunkedMessages)
	ChunkedDropped int64
	// Undecodable: messages egress consumers could not decode, by reason (a bounded set
	// of snake_case words), whatever became of them.
	Undecodable map[string]int64
}

// ObservePulsar registers instruments read from stats at each scrape.
func (m *Metrics) ObservePulsar(stats func() PulsarStats) error {
	mt := m.provider.Meter("github.com/recordio-bridge/bridge")
	pendingMsgs, err1 := mt.Int64ObservableGauge("bridge.pulsar.producer.pending.messages", metric.WithDescription("Messages sent and awaiting the broker's receipt."))
	pendingBytes, err2 := mt.Int64ObservableGauge("bridge.pulsar.producer.pending.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes sent and awaiting the broker's receipt."))
	reconnects, err3 := mt.Int64ObservableCounter("bridge.pulsar.reconnects", metric.WithDescription("Reconnections of producers and consumers to the broker, by kind."))
	permits, err4 := mt.Int64ObservableCounter("bridge.egress.permits", metric.WithDescription("FLOW permits granted to the broker by egress consumers."))
	buffered, err5 := mt.Int64ObservableGauge("bridge.egress.buffered.messages", metric.WithDescription("Messages received from the broker and not yet written to a client."))
	discarded, err6 := mt.Int64ObservableCounter("bridge.egress.discarded", metric.WithDescription("Messages egress consumers discarded (and acknowledged) by reason: corrupt (checksum) or malformed (metadata, batch or chunk fields), both acknowledged with a validation error; chunked_incomplete, chunked messages dropped before they were whole (expired, or pushed out by maxPendingChunkedMessages)."))
	undecodable, err7 := mt.Int64ObservableCounter("bridge.egress.undecodable", metric.WithDescription("Messages egress consumers could not decode, by reason: checksum_mismatch, bad_metadata, decompression_error, uncompressed_size_corruption, bad_batch, bad_chunk, encrypted; each arrival counts (a redelivered one again), whether it was dead-lettered, acknowledged, delivered encrypted or ended its stream."))
	if err := errors.Join(err1, err2, err3, err4, err5, err6, err7); err != nil {
		return err
	}
	corrupt := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "corrupt")))
	malformed := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "malformed")))
	chunked := metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", "chunked_incomplete")))
	prod := metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "producer")))
	cons := metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "consumer")))
	_, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		o.ObserveInt64(pendingMsgs, s.PendingMessages)
		o.ObserveInt64(pendingBytes, s.PendingBytes)
		o.ObserveInt64(reconnects, s.ProducerReconnects, prod)
		o.ObserveInt64(reconnects, s.ConsumerReconnects, cons)
		o.ObserveInt64(permits, s.PermitsGranted)
		o.ObserveInt64(buffered, s.Buffered)
		o.ObserveInt64(discarded, s.Corrupt, corrupt)
		o.ObserveInt64(discarded, s.Malformed, malformed)
		o.ObserveInt64(discarded, s.ChunkedDropped, chunked)
		for reason, n := range s.Undecodable {
			o.ObserveInt64(undecodable, n, metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", reason))))
		}
		return nil
	}, pendingMsgs, pendingBytes, reconnects, permits, buffered, discarded, undecodable)
	return err
}

// Health is what /readyz finds at one instant.
type Health struct {
	BrokerUp bool // the broker's handshake succeeded (pulsar.Client.Ping)
	Ready    bool // /readyz would answer 200
}

// ObserveHealth registers bridge_pulsar_broker_up and bridge_ready (0 or 1), read from
// check at each scrape.
func (m *Metrics) ObserveHealth(check func(context.Context) Health) error {
	mt := m.provider.Meter("github.com/recordio-bridge/bridge")
	up, err1 := mt.Int64ObservableGauge("bridge.pulsar.broker.up", metric.WithDescription("1 when the broker of pulsar.url completed a handshake at this scrape (as /readyz checks it), 0 when it could not be reached within 2s."))
	ready, err2 := mt.Int64ObservableGauge("bridge.ready", metric.WithDescription("1 when /readyz would answer 200 at this scrape, 0 when 503 (broker unreachable, credentials failing, draining)."))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	b2i := func(b bool) int64 {
		if b {
			return 1
		}
		return 0
	}
	_, err := mt.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		h := check(ctx)
		o.ObserveInt64(up, b2i(h.BrokerUp))
		o.ObserveInt64(ready, b2i(h.Ready))
		return nil
	}, up, ready)
	return err
}

// MemoryStats are the process-wide memory budget's figures at one instant, and what
// its users hold of it.
type MemoryStats struct {
	Limit, Used, Peak int64
	// ConsumerQueues: messages in egress consumers' queues and the chunks of those they
	// are reassembling; ConsumerReserved: reserved
	// for their flow permits in flight; Egress: handed to egress streams and not yet
	// settled; Ingress: the rest (records awaiting their broker receipt).
	ConsumerQueues, ConsumerReserved, Egress, Ingress int64
}

// ObserveMemory registers bridge_memory_budget_limit_bytes, _used_bytes, _peak_bytes and
// bridge_memory_budget_charged_bytes{user=ingress|consumer_queues|consumer_reserved|egress},
// read from stats at each scrape (all 0 with no budget).
func (m *Metrics) ObserveMemory(stats func() MemoryStats) error {
	mt := m.provider.Meter("github.com/recordio-bridge/bridge")
	limit, err1 := mt.Int64ObservableGauge("bridge.memory.budget.limit.bytes", metric.WithUnit("By"), metric.WithDescription("The process-wide memory budget (memory.budget)."))
	used, err2 := mt.Int64ObservableGauge("bridge.memory.budget.used.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes charged to the memory budget now."))
	peak, err3 := mt.Int64ObservableGauge("bridge.memory.budget.peak.bytes", metric.WithUnit("By"), metric.WithDescription("The most bytes ever charged to the memory budget at once."))
	charged, err4 := mt.Int64ObservableGauge("bridge.memory.budget.charged.bytes", metric.WithUnit("By"), metric.WithDescription("Bytes charged to the memory budget by user: ingress (records awaiting receipts), consumer_queues (messages in egress consumers' queues, and chunks of messages being reassembled), consumer_reserved (reserved for their permits in flight), egress (handed to streams, not yet acknowledged)."))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return err
	}
	user := func(u string) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("user", u)))
	}
	ingress, queues, reserved, egress := user("ingress"), user("consumer_queues"), user("consumer_reserved"), user("egress")
	_, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := stats()
		o.ObserveInt64(limit, s.Limit)
		o.ObserveInt64(used, s.Used)
		o.ObserveInt64(peak, s.Peak)
		o.ObserveInt64(charged, s.Ingress, ingress)
		o.ObserveInt64(charged, s.ConsumerQueues, queues)
		o.ObserveInt64(charged, s.ConsumerReserved, reserved)
		o.ObserveInt64(charged, s.Egress, egress)
		return nil
	}, limit, used, peak, charged)
	return err
}

// JWKSStats are the counters of one JWT issuer's key set (auth.jwt), by issuer URL.
type JWKSStats struct {
	Issuer               string
	Fetches, FetchErrors int64 // fetches of the JWKS (with discovery first when needed), and the failed ones
	RefreshesRefused     int64 // unknown key ids (or held ones that did not verify) that did not fetch it again: the last fetch was too recent
	Verifications        int64 // tokens whose signature was checked
}

// ObserveJWKS registers bridge_auth_jwks_fetches_total{issuer,result=ok|error},
// bridge_auth_jwks_refresh_refused_total{issuer} and
// bridge_auth_jwt_verifications_total{issuer}, read from stats at each scrape.
func (m *Metrics) ObserveJWKS(stats func() []JWKSStats) error {
	mt := m.provider.Meter("github.com/recordio-bridge/bridge")
	fetches, err1 := mt.Int64ObservableCounter("bridge.auth.jwks.fetches", metric.WithDescription("Fetches of a JWT issuer's key set (auth.jwt; with its discovery document while its jwks_uri is not known), by issuer and result: ok, error (the identity provider could not be reached or answered wrong; its tokens are answered 503)."))
	refused, err2 := mt.Int64ObservableCounter("bridge.auth.jwks.refresh.refused", metric.WithDescription("Tokens naming a key id their issuer's key set does not hold (or whose held key of that id does not verify them) that did not fetch the set again, because its last fetch was less than the issuer's keyRefreshInterval (10s by default) ago; they are refused 401. Forged tokens count here."))
	verified, err3 := mt.Int64ObservableCounter("bridge.auth.jwt.verifications", metric.WithDescription("JWTs whose signature was checked against their issuer's keys, by issuer: one per request carrying a JWT."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	_, err := mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, s := range stats() {
			iss := attribute.String("issuer", s.Issuer)
			o.ObserveInt64(fetches, s.Fetches-s.FetchErrors, metric.WithAttributeSet(attribute.NewSet(iss, attribute.String("result", "ok"))))
			o.ObserveInt64(fetches, s.FetchErrors, metric.WithAttributeSet(attribute.NewSet(iss, attribute.String("result", "error"))))
			o.ObserveInt64(refused, s.RefreshesRefused, metric.WithAttributeSet(attribute.NewSet(iss)))
			o.ObserveInt64(verified, s.Verifications, metric.WithAttributeSet(attribute.NewSet(iss)))
		}
		return nil
	}, fetches, refused, verified)
	return err
}

// ObserveSpans registers bridge.trace.spans{result=ended|exported|failed|dropped}:
// sampled spans ended, accepted by the exporter, lost to failed exports, and (when the
// span processor counts them: otlpwire's) dropped because the export queue was full.
// Ended - exported - failed - dropped is what waits in the export queue (without a
// dropped count, or dropped). With otlpwire's exporter also bridge.trace.spans.rejected:
// spans collectors rejected in partial successes (counted in exported too).
func (m *Metrics) ObserveSpans(c *SpanCounts) error {
	mt := m.provider.Meter("github.com/recordio-bridge/bridge")
	spans, err := mt.Int64ObservableCounter("bridge.trace.spans", metric.WithDescription("Sampled spans by result: ended, exported, failed (lost to a failed export) or dropped (the export queue was full; with tracing.exporter wire and recordSpans direct). Ended minus the others is queued (or, without dropped, dropped)."))
	if err != nil {
		return err
	}
	rejected, err := mt.Int64ObservableCounter("bridge.trace.spans.rejected", metric.WithDescription("Spans collectors rejected in partial successes (tracing.exporter wire); their requests were accepted, so they count as exported too."))
	if err != nil {
		return err
	}
	ended := metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "ended")))
	exported := metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "exported")))
	failed := metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "failed")))
	dropped := metric.WithAttributeSet(attribute.NewSet(attribute.String("result", "dropped")))
	_, err = mt.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(spans, c.Ended(), ended)
		o.ObserveInt64(spans, c.Exported(), exported)
		o.ObserveInt64(spans, c.Failed(), failed)
		if n, ok := c.Dropped(); ok {
			o.ObserveInt64(spans, n, dropped)
		}
		if n, ok := c.Rejected(); ok {
			o.ObserveInt64(rejected, n)
		}
		return nil
	}, spans, rejected)
	return err
}

// EgressStreamStarted counts an egress stream in, and makes its dead-letter series
// exist at 0, so an alert on their increase sees the first one.
func (m *Metrics) EgressStreamStarted(stream string) {
	m.egressActive.Add(bg, 1, m.opt(stream, 0, 2))
	m.egressStreams.Add(bg, 1, m.opt(stream, 0, 2))
	m.filtered.Add(bg, 0, m.opt(stream, 0, 2))
	for _, result := range [...]string{"ok", "failed"} {
		m.deadLetters.Add(bg, 0, metric.WithAttributes(attribute.String("stream", stream), attribute.String("result", result)))
	}
}

// EgressStreamEnded counts an egress stream out.
func (m *Metrics) EgressStreamEnded(stream string) { m.egressActive.Add(bg, -1, m.opt(stream, 0, 2)) }

// RecordsWritten counts records flushed to a client and the lag of the newest.
func (m *Metrics) RecordsWritten(stream string, n, bytes int64, lag time.Duration) {
	o := m.opt(stream, 0, 2)
	m.egressRecords.Add(bg, n, o)
	m.egressBytes.Add(bg, bytes, o)
	m.egressLag.Record(bg, lag.Seconds(), o)
}

// Acked counts acknowledgements and, for client acks, their latency.
func (m *Metrics) Acked(stream string, n int64, latency time.Duration) {
	o := m.opt(stream, 0, 2)
	m.egressAcks.Add(bg, n, o)
	if latency > 0 {
		m.ackLatency.Record(bg, latency.Seconds(), o)
	}
}

// Nacked counts a message sent back for redelivery (egress.RetryObserver).
func (m *Metrics) Nacked(stream, cause string, deliveries uint32) {
	m.egressNacks.Add(bg, 1, metric.WithAttributes(attribute.String("stream", stream), attribute.String("cause", cause),
		attribute.String("attempt", strconv.Itoa(int(min(deliveries, 10))))))
}

// DeadLettered counts a message moved to a dead-letter topic, or whose move failed.
func (m *Metrics) DeadLettered(stream string, ok bool) {
	result := "ok"
	if !ok {
		result = "failed"
	}
	m.deadLetters.Add(bg, 1, metric.WithAttributes(attribute.String("stream", stream), attribute.String("result", result)))
}

// RateLimited adds the time a rate-limited stream waited (egress.RateObserver).
func (m *Metrics) RateLimited(stream string, waited time.Duration) {
	m.rateLimited.Add(bg, waited.Seconds(), m.opt(stream, 0, 2))
}

// Filtered counts messages a stream's filter did not keep (egress.FilterObserver).
func (m *Metrics) Filtered(stream string, n int64) {
	m.filtered.Add(bg, n, m.opt(stream, 0, 2))
}
