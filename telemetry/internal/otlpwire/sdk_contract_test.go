package otlpwire

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The encoder reads spans only through the SDK's interfaces and value types: the
// methods of sdktrace.ReadOnlySpan and the fields of what they return. The SDK may add
// to them in a minor release ("methods may be added to this interface in minor
// releases"), and an addition is data the encoder would silently leave out of every
// request. This test lists what the encoder was written against, so an upgrade that
// changes any of it fails here, naming what changed: read the SDK's change, encode the
// new data (and extend the differential tests) or say here why it is not sent, then
// update the list. It implements none of these interfaces: the SDK reserves
// ReadOnlySpan to itself (its unexported method), and the Processor is a SpanProcessor,
// which the compiler checks.
func TestTheSDKInterfacesTheEncoderReadsAreUnchanged(t *testing.T) {
	for _, c := range []struct {
		what string
		typ  reflect.Type
		want []string
	}{
		{"sdktrace.ReadOnlySpan's methods", reflect.TypeFor[sdktrace.ReadOnlySpan](), []string{
			"Attributes() []attribute.KeyValue",
			"ChildSpanCount() int", // not in OTLP
			"DroppedAttributes() int",
			"DroppedEvents() int",
			"DroppedLinks() int",
			"EndTime() time.Time",
			"Events() []trace.Event",
			"InstrumentationLibrary() instrumentation.Scope", // deprecated: InstrumentationScope's
			"InstrumentationScope() instrumentation.Scope",
			"Links() []trace.Link",
			"Name() string",
			"Parent() trace.SpanContext",
			"Resource() *resource.Resource",
			"SpanContext() trace.SpanContext",
			"SpanKind() trace.SpanKind",
			"StartTime() time.Time",
			"Status() trace.Status",
			"private()", // the SDK's guard: only its own spans implement the interface
		}},
		{"sdktrace.Link's fields", reflect.TypeFor[sdktrace.Link](), []string{
			"Attributes []attribute.KeyValue", "DroppedAttributeCount int", "SpanContext trace.SpanContext"}},
		{"sdktrace.Event's fields", reflect.TypeFor[sdktrace.Event](), []string{
			"Attributes []attribute.KeyValue", "DroppedAttributeCount int", "Name string", "Time time.Time"}},
		{"sdktrace.Status's fields", reflect.TypeFor[sdktrace.Status](), []string{"Code codes.Code", "Description string"}},
		{"instrumentation.Scope's fields", reflect.TypeFor[instrumentation.Scope](), []string{
			"Attributes attribute.Set", "Name string", "SchemaURL string", "Version string"}},
	} {
		if got := members(c.typ); !slices.Equal(got, c.want) {
			t.Errorf("%s changed: the encoder was written against\n\t%s\nthe SDK has\n\t%s", c.what,
				strings.Join(c.want, "\n\t"), strings.Join(got, "\n\t"))
		}
	}
	// The attribute value types appendAnyValue encodes; a new one would be sent empty.
	var types []string
	for i := range 32 {
		if s := attribute.Type(i).String(); !strings.HasPrefix(s, "Type(") {
			types = append(types, s)
		}
	}
	if want := []string{"EMPTY", "BOOL", "INT64", "FLOAT64", "STRING", "BOOLSLICE", "INT64SLICE", "FLOAT64SLICE", "STRINGSLICE",
		"BYTESLICE", "SLICE", "MAP"}; !slices.Equal(types, want) {
		t.Errorf("attribute.Type values %v, the encoder knows %v", types, want)
	}
	// The span kinds the encoder maps to OTLP's (maxSpanKind).
	if k := trace.SpanKind(maxSpanKind + 1).String(); k != "unspecified" {
		t.Errorf("trace.SpanKind %d is %q: the encoder sends kinds up to %d", maxSpanKind+1, k, maxSpanKind)
	}
}

// members are an interface's exported methods or a struct's exported fields, each with
// its type, sorted.
func members(t reflect.Type) []string {
	var out []string
	if t.Kind() == reflect.Interface {
		for i := range t.NumMethod() {
			m := t.Method(i)
			sig := strings.TrimPrefix(m.Type.String(), "func")
			out = append(out, m.Name+sig)
		}
	} else {
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				out = append(out, f.Name+" "+f.Type.String())
			}
		}
	}
	slices.Sort(out)
	return out
}
