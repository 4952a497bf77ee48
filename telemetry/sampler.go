package telemetry

import (
	"encoding/binary"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// fastSampler is a sampler OTEL_TRACES_SAMPLER names (always_on, always_off,
// traceidratio, and parentbased_ each of those), built by newSampler: the SDK's own
// sampler, which the provider asks for every span it starts, and the same decision
// computed without its parameters, contexts and interface calls, which startRecord asks
// for every record. The two agree for every trace id and parent
// (TestFastSamplerDecidesAsTheSDKSampler):
//
//   - a parent-based sampler with a valid parent samples exactly when the parent is
//     sampled (the SDK's default parent samplers are always_on for a sampled parent,
//     remote or local, and always_off for an unsampled one);
//   - otherwise the root sampler decides from the trace id: always_on samples all,
//     always_off none, and traceidratio r samples when the trace id's last 8 bytes, big
//     endian, shifted right by one, are below uint64(r * 2^63) — the SDK's bound;
//   - the tracestate is the parent's (none without a valid parent), and the decision is
//     never RecordOnly.
type fastSampler struct {
	sdktrace.Sampler
	parentBased bool
	// bound: a root is sampled when its trace id's low 63 bits (as the SDK reads them)
	// are below it. 1<<63 samples all, 0 none.
	bound uint64
}

// newSampler makes the sampler named (as OTEL_TRACES_SAMPLER names it, lower case) with
// ratio for the traceidratio ones.
func newSampler(name string, ratio float64) (*fastSampler, error) {
	var root sdktrace.Sampler
	var bound uint64
	base := name
	parentBased := false
	if len(name) > len("parentbased_") && name[:len("parentbased_")] == "parentbased_" {
		base, parentBased = name[len("parentbased_"):], true
	}
	switch base {
	case "always_on":
		root, bound = sdktrace.AlwaysSample(), 1<<63
	case "always_off":
		root, bound = sdktrace.NeverSample(), 0
	case "traceidratio":
		// As sdktrace.TraceIDRatioBased: 1 and above samples all, 0 and below none.
		root = sdktrace.TraceIDRatioBased(ratio)
		switch {
		case ratio >= 1:
			bound = 1 << 63
		case ratio <= 0:
			bound = 0
		default:
			bound = uint64(ratio * (1 << 63))
		}
	default:
		return nil, fmt.Errorf("sampler %q: want always_on, always_off, traceidratio or parentbased_ one of those", name)
	}
	if parentBased {
		root = sdktrace.ParentBased(root)
	}
	return &fastSampler{Sampler: root, parentBased: parentBased, bound: bound}, nil
}

// decide is the sampler's decision for a span of trace tid whose parent is parent
// (invalid for none): sampled or dropped, and the tracestate the span gets.
func (s *fastSampler) decide(parent trace.SpanContext, tid trace.TraceID) (sampled bool, ts trace.TraceState) {
	if !parent.IsValid() {
		return s.decideRoot(&tid), ts
	}
	if s.parentBased {
		return s.decideChild(parent)
	}
	return s.decideRoot(&tid), parent.TraceState()
}

// decideRoot is decide for a span without a parent.
func (s *fastSampler) decideRoot(tid *trace.TraceID) bool {
	return binary.BigEndian.Uint64(tid[8:16])>>1 < s.bound
}

// decideChild is decide for a span whose parent is valid, of the parent's trace.
func (s *fastSampler) decideChild(parent trace.SpanContext) (bool, trace.TraceState) {
	if s.parentBased {
		return parent.IsSampled(), parent.TraceState()
	}
	tid := parent.TraceID()
	return s.decideRoot(&tid), parent.TraceState()
}
