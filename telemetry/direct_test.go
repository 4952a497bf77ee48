package telemetry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// recorder is a span processor that keeps every span ended, sampled or record-only, as
// a SpanStub.
type recorder struct {
	mu    sync.Mutex
	spans tracetest.SpanStubs
}

func (r *recorder) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (r *recorder) OnEnd(s sdktrace.ReadOnlySpan) {
	r.mu.Lock()
	r.spans = append(r.spans, tracetest.SpanStubFromReadOnlySpan(s))
	r.mu.Unlock()
}
func (r *recorder) Shutdown(context.Context) error   { return nil }
func (r *recorder) ForceFlush(context.Context) error { return nil }

func (r *recorder) take() tracetest.SpanStubs {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.spans
	r.spans = nil
	return s
}

// pair is the same pipeline twice, record spans made through the SDK's tracer and by
// directspan, each with a recorder (every span) and the in-memory exporter (what the
// batch processor exports), and the same end times.
type pair struct {
	sdk, direct       *Tracing
	sdkRec, directRec *recorder
	sdkExp, directExp *tracetest.InMemoryExporter
}

func newPair(t *testing.T, sampler sdktrace.Sampler, res *resource.Resource) *pair {
	t.Helper()
	p := &pair{sdkRec: &recorder{}, directRec: &recorder{}, sdkExp: tracetest.NewInMemoryExporter(), directExp: tracetest.NewInMemoryExporter()}
	var err error
	if p.sdk, err = newTracing("v9", res, sampler, bigSegments, recordSpans{observe: p.sdkRec}, p.sdkExp); err != nil {
		t.Fatal(err)
	}
	if p.direct, err = newTracing("v9", res, sampler, bigSegments, recordSpans{direct: true, observe: p.directRec}, p.directExp); err != nil {
		t.Fatal(err)
	}
	if p.direct.direct == nil || p.sdk.direct != nil {
		t.Fatal("the pair's pipelines are not sdk and direct")
	}
	end := func(start time.Time) time.Time { return start.Add(1234567 * time.Nanosecond) }
	p.sdk.endTime, p.direct.endTime = end, end
	t.Cleanup(func() {
		_ = p.sdk.Shutdown(context.Background())
		_ = p.direct.Shutdown(context.Background())
	})
	return p
}

// record is one record made both ways: started once (so both have its ids and
// decision), ended in each pipeline.
type record struct {
	process   bool
	parent    trace.SpanContext
	props     map[string]string // process: the message's properties
	link      trace.SpanContext
	topic     string
	group     string
	size      int64
	messageID string
	err       error
}

func (p *pair) make(r record, start time.Time) {
	var a RecordSpan
	if r.process {
		p.sdk.StartProcess(&a, r.props, r.link, r.topic, r.group, r.size, start)
	} else {
		p.sdk.StartPublish(&a, r.parent, r.link, r.topic, r.size, start)
	}
	b := a
	p.sdk.EndRecord(&a, r.messageID, r.err)
	p.direct.EndRecord(&b, r.messageID, r.err)
}

// check compares what both pipelines' processors saw and exported, span by span.
func (p *pair) check(t *testing.T, what string) int {
	t.Helper()
	for _, tr := range []*Tracing{p.sdk, p.direct} {
		if err := tr.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, c := range []struct {
		name     string
		sdk, dir tracetest.SpanStubs
	}{{"every span ended", p.sdkRec.take(), p.directRec.take()}, {"exported", p.sdkExp.GetSpans(), p.directExp.GetSpans()}} {
		p.sdkExp.Reset()
		p.directExp.Reset()
		if len(c.sdk) != len(c.dir) {
			t.Fatalf("%s, %s: %d spans through the SDK, %d direct", what, c.name, len(c.sdk), len(c.dir))
		}
		for i := range c.sdk {
			if !reflect.DeepEqual(c.sdk[i], c.dir[i]) {
				t.Fatalf("%s, %s, span %d differs:\nsdk    %s\ndirect %s", what, c.name, i, stubString(c.sdk[i]), stubString(c.dir[i]))
			}
		}
		n += len(c.sdk)
	}
	if a, b := p.sdk.Spans.Ended(), p.direct.Spans.Ended(); a != b {
		t.Fatalf("%s: %d spans counted ended through the SDK, %d direct", what, a, b)
	}
	return n
}

func stubString(s tracetest.SpanStub) string {
	return fmt.Sprintf("%q sc=%v parent=%v kind=%v start=%v end=%v attrs=%v dropped=%d links=%+v droppedLinks=%d events=%+v droppedEvents=%d status=%+v children=%d scope=%+v resource=%v",
		s.Name, s.SpanContext, s.Parent, s.SpanKind, s.StartTime, s.EndTime, s.Attributes, s.DroppedAttributes, s.Links, s.DroppedLinks, s.Events,
		s.DroppedEvents, s.Status, s.ChildSpanCount, s.InstrumentationScope, s.Resource)
}

// brokerError is an error of a named type of its own, for the exception event's type.
type brokerError struct{ code int }

func (e *brokerError) Error() string { return fmt.Sprintf("broker error %d", e.code) }

// The limits the differential tests run under: the SDK's defaults, and tight ones that
// truncate and drop attributes, links and events.
var limitCases = []struct {
	name string
	env  map[string]string
}{
	{"defaults", nil},
	{"tight", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "3", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "7",
		"OTEL_SPAN_EVENT_COUNT_LIMIT": "1", "OTEL_SPAN_LINK_COUNT_LIMIT": "1", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "1",
		"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": "0"}},
	{"none allowed", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "0", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "0",
		"OTEL_SPAN_EVENT_COUNT_LIMIT": "0", "OTEL_SPAN_LINK_COUNT_LIMIT": "0", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "0"}},
	{"attributes at the limit", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "5", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "1",
		"OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": "2"}},
	// directspan's shapes (endDirect): every record span's attributes within the count,
	// constants and values cut by length; and a count a process span with a message id
	// passes (its shape takes the general path) while one without does not.
	{"all attributes, values cut", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "7", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "4"}},
	{"one attribute short", map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "6", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "12"}},
}

func setLimits(t *testing.T, env map[string]string) {
	for _, k := range []string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_EVENT_COUNT_LIMIT",
		"OTEL_SPAN_LINK_COUNT_LIMIT", "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT",
		"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"} {
		t.Setenv(k, env[k])
	}
}

// tracing.recordSpans: direct makes the same spans as the SDK's tracer, in every field a
// span processor and the exporter see: publish and process records, with and without a
// client's parent (with a tracestate), sampled and record-only, failed with an error,
// with and without a message id, linked to a segment or not, under the SDK's default
// span limits and under tight ones (OTEL_SPAN_*) that truncate and drop.
func TestDirectSpansEqualSDKSpans(t *testing.T) {
	ts, _ := trace.ParseTraceState("vendor=x,other=y")
	client := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, TraceFlags: trace.FlagsSampled,
		TraceState: ts, Remote: true})
	local := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{7}, SpanID: trace.SpanID{8}, TraceFlags: trace.FlagsSampled})
	segment := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9}, SpanID: trace.SpanID{10}, TraceFlags: trace.FlagsSampled})
	props := map[string]string{}
	(&RecordSpan{tid: client.TraceID(), sid: client.SpanID(), flags: trace.FlagsSampled, state: ts}).Inject(props)
	unsampledProps := map[string]string{"traceparent": strings.Replace(props["traceparent"], "-01", "-00", 1)}
	errs := []error{nil, errors.New("the broker said no"), &brokerError{503}, fmt.Errorf("publish: %w", context.DeadlineExceeded)}
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0", AttrHTTPRoute("r"))
	samplers := []struct {
		name string
		s    sdktrace.Sampler
	}{
		{"always_on", mustSampler(t, "always_on")},
		{"parentbased_always_off", mustSampler(t, "parentbased_always_off")},
		{"record-only", sdktrace.AlwaysRecord(sdktrace.NeverSample())},
	}
	for _, lc := range limitCases {
		t.Run(lc.name, func(t *testing.T) {
			setLimits(t, lc.env)
			for _, sc := range samplers {
				p := newPair(t, sc.s, res)
				start := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
				n := 0
				for _, process := range []bool{false, true} {
					for pi, parent := range []trace.SpanContext{{}, client, local} {
						for _, link := range []trace.SpanContext{{}, segment} {
							for _, err := range errs {
								for _, id := range []string{"", "12:34:-1:0"} {
									r := record{process: process, parent: parent, link: link, topic: "persistent://public/default/töpic-ü",
										group: "subscription-name", size: int64(1024 + n), messageID: id, err: err}
									if process {
										r.props = []map[string]string{nil, props, unsampledProps}[pi]
									}
									start = start.Add(time.Millisecond)
									p.make(r, start)
									n++
								}
							}
						}
					}
				}
				// A failed record that never had a topic (ingress's publishFailed).
				p.make(record{err: errors.New("unroutable")}, start.Add(time.Second))
				if got := p.check(t, sc.name); got == 0 {
					t.Fatalf("%s: no span to compare", sc.name)
				}
			}
		})
	}
}

// The same, with records drawn at random: topics of random length and characters
// (multi-byte and invalid UTF-8, so truncation by characters is compared), random
// parents, decisions, errors, ids, sizes and links, under random limits.
func TestDirectSpansEqualSDKSpansRandomly(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	seed := rng.Uint64()
	t.Logf("seed %d", seed)
	rng = rand.New(rand.NewPCG(seed, 7))
	alphabet := []string{"a", "Z", "/", "-", "ü", "€", "𝄞", "\xff", "\xc3", "\uFFFD", ":", " "}
	randString := func(max int) string {
		var b strings.Builder
		for range rng.IntN(max + 1) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	limit := func() string { return []string{"", "0", "1", "2", "3", "4", "6", "16", "-1"}[rng.IntN(9)] }
	total := 0
	for round := range 12 {
		setLimits(t, map[string]string{"OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": limit(), "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": limit(),
			"OTEL_SPAN_EVENT_COUNT_LIMIT": limit(), "OTEL_SPAN_LINK_COUNT_LIMIT": limit(), "OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT": limit(),
			"OTEL_LINK_ATTRIBUTE_COUNT_LIMIT": limit()})
		samplers := []sdktrace.Sampler{mustSampler(t, "parentbased_traceidratio"), sdktrace.AlwaysRecord(sdktrace.TraceIDRatioBased(0.5)),
			mustSampler(t, "always_on")}
		p := newPair(t, samplers[round%len(samplers)], resource.NewSchemaless(AttrHTTPRoute(randString(8))))
		start := time.Now()
		for range 300 {
			var parent trace.SpanContext
			if rng.IntN(2) == 0 {
				var cfg trace.SpanContextConfig
				for i := range cfg.TraceID {
					cfg.TraceID[i] = byte(rng.Uint32())
				}
				cfg.SpanID = trace.SpanID{byte(rng.Uint32()), 1}
				cfg.TraceFlags = trace.TraceFlags(rng.IntN(2))
				cfg.Remote = rng.IntN(2) == 0
				if rng.IntN(2) == 0 {
					cfg.TraceState, _ = trace.ParseTraceState(fmt.Sprintf("k%d=v%d", rng.IntN(9), rng.IntN(9)))
				}
				parent = trace.NewSpanContext(cfg)
			}
			var link trace.SpanContext
			if rng.IntN(3) > 0 {
				link = trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{byte(rng.Uint32()), 1}, SpanID: trace.SpanID{2},
					TraceFlags: trace.FlagsSampled})
			}
			var err error
			switch rng.IntN(4) {
			case 1:
				err = errors.New(randString(20))
			case 2:
				err = &brokerError{rng.IntN(600)}
			}
			r := record{process: rng.IntN(2) == 0, link: link, topic: randString(24), group: randString(10), size: rng.Int64N(1 << 30),
				messageID: []string{"", "1:2:3:4", randString(12)}[rng.IntN(3)], err: err}
			if r.process {
				if parent.IsValid() {
					props := map[string]string{}
					(&RecordSpan{tid: parent.TraceID(), sid: parent.SpanID(), flags: parent.TraceFlags(), state: parent.TraceState()}).Inject(props)
					r.props = props
				}
			} else {
				r.parent = parent
			}
			start = start.Add(time.Duration(rng.IntN(1e6)))
			p.make(r, start)
		}
		total += p.check(t, fmt.Sprintf("round %d", round))
	}
	if total == 0 {
		t.Fatal("no span compared")
	}
}

func mustSampler(t *testing.T, name string) sdktrace.Sampler {
	s, err := newSampler(name, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A record that ends after Shutdown (a stream still settling its last records) is
// handed to no processor, as the SDK's tracer hands it to none once its provider is shut
// down: with recordSpans direct too, nothing is counted ended or seen by a processor.
func TestDirectSpansAfterShutdownReachNoProcessor(t *testing.T) {
	p := newPair(t, mustSampler(t, "always_on"), resource.NewSchemaless())
	start := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	var started [4]RecordSpan
	for i := range started {
		p.sdk.StartPublish(&started[i], trace.SpanContext{}, trace.SpanContext{}, "t", 10, start)
	}
	p.make(record{topic: "t", size: 10, messageID: "1:1:-1:0"}, start) // one before, both ways
	if n := p.check(t, "before Shutdown"); n != 2 {
		t.Fatalf("%d spans before Shutdown; want 1 seen and 1 exported", n)
	}
	for _, tr := range []*Tracing{p.sdk, p.direct} {
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for i := range started {
		a := started[i]
		b := a
		err := error(nil)
		if i%2 == 1 {
			err = errors.New("failed after shutdown")
		}
		p.sdk.EndRecord(&a, "1:2:-1:0", err)
		p.direct.EndRecord(&b, "1:2:-1:0", err)
	}
	if a, b := len(p.sdkRec.take()), len(p.directRec.take()); a != 0 || b != 0 {
		t.Fatalf("after Shutdown a processor saw %d spans through the SDK, %d direct; want none", a, b)
	}
	if a, b := p.sdk.Spans.Ended(), p.direct.Spans.Ended(); a != b {
		t.Fatalf("after Shutdown: %d spans counted ended through the SDK, %d direct", a, b)
	}
}
