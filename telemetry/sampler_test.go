package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The decision startRecord computes for a sampler OTEL_TRACES_SAMPLER names is the one
// the SDK's sampler gives, for every such sampler, over many trace ids (random ones and
// ones either side of the ratio's bound) and parents (none, remote and local, sampled
// and not, with and without a tracestate, and an invalid one carrying a tracestate).
func TestFastSamplerDecidesAsTheSDKSampler(t *testing.T) {
	names := []string{"", "always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
		"parentbased_traceidratio"}
	args := []string{"", "0", "1", "0.01", "0.1", "0.25", "0.5", "0.3333333333333333", "0.999999999", "1e-9", "5e-324"}
	ts, err := trace.ParseTraceState("vendor=x,other=y")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	randomTID := func() (id trace.TraceID) {
		binary.LittleEndian.PutUint64(id[:8], rng.Uint64())
		binary.LittleEndian.PutUint64(id[8:], rng.Uint64())
		return id
	}
	for _, name := range names {
		for _, arg := range args {
			t.Setenv("OTEL_TRACES_SAMPLER", name)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", arg)
			s, err := samplerFromEnv()
			if err != nil {
				t.Fatalf("%s %s: %v", name, arg, err)
			}
			// Trace ids: random, and those whose 63 bits the SDK reads are at the bound
			// and one either side of it.
			tids := make([]trace.TraceID, 0, 3000)
			for range 2000 {
				tids = append(tids, randomTID())
			}
			for _, x := range []uint64{s.bound - 1, s.bound, s.bound + 1, 0, 1<<63 - 1} {
				for _, low := range []uint64{0, 1} { // the bit the SDK shifts out
					id := randomTID()
					binary.BigEndian.PutUint64(id[8:], x<<1|low)
					tids = append(tids, id)
				}
			}
			sampledRoots := 0
			for i, tid := range tids {
				parents := []trace.SpanContext{{}, trace.SpanContext{}.WithTraceState(ts)}
				for _, remote := range []bool{true, false} {
					for _, flags := range []trace.TraceFlags{0, trace.FlagsSampled} {
						for _, state := range []trace.TraceState{{}, ts} {
							parents = append(parents, trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid,
								SpanID: trace.SpanID{byte(i), 1}, TraceFlags: flags, TraceState: state, Remote: remote}))
						}
					}
				}
				for _, parent := range parents {
					pctx := context.Background()
					if parent.IsValid() {
						pctx = trace.ContextWithSpanContext(pctx, parent)
					}
					for _, kind := range []trace.SpanKind{trace.SpanKindProducer, trace.SpanKindConsumer} {
						want := s.Sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: pctx, TraceID: tid, Kind: kind,
							Name: "publish t"})
						if want.Decision == sdktrace.RecordOnly {
							t.Fatalf("%s %s: the SDK's sampler said RecordOnly", name, arg)
						}
						sampled, state := s.decide(parent, tid)
						if sampled != (want.Decision == sdktrace.RecordAndSample) || state.String() != want.Tracestate.String() {
							t.Fatalf("%s %q (%s), trace %v, parent %v: fast %v %q; the SDK %v %q", name, arg, s.Description(), tid, parent,
								sampled, state.String(), want.Decision, want.Tracestate.String())
						}
						if parent.IsValid() {
							if ds, dstate := s.decideChild(parent); ds != sampled || dstate.String() != state.String() {
								t.Fatalf("%s %q: decideChild %v %q, decide %v %q", name, arg, ds, dstate.String(), sampled, state.String())
							}
						} else if s.decideRoot(&tid) != sampled {
							t.Fatalf("%s %q: decideRoot differs from decide", name, arg)
						} else if sampled {
							sampledRoots++
						}
					}
				}
			}
			// The comparison saw both outcomes wherever the sampler has both.
			if sampledRoots == 0 && s.bound != 0 && s.bound > 1<<40 {
				t.Fatalf("%s %q: no root sampled", name, arg)
			}
		}
	}
}

// newSampler names the samplers OTEL_TRACES_SAMPLER does and nothing else.
func TestNewSamplerNamesOnlyTheKnownSamplers(t *testing.T) {
	for _, name := range []string{"always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
		"parentbased_traceidratio"} {
		if _, err := newSampler(name, 0.5); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"jaeger_remote", "parentbased_", "parentbased_parentbased_always_on", "xray", "ALWAYS_ON"} {
		if s, err := newSampler(name, 0.5); err == nil {
			t.Errorf("%s: accepted as %v", name, s.Description())
		}
	}
}

// Root records get distinct, valid ids: the span id mixed from the trace id's two
// random words is never zero and not shared.
func TestRootIDsAreValidAndDistinct(t *testing.T) {
	seenT := map[trace.TraceID]bool{}
	seenS := map[trace.SpanID]bool{}
	for i := range 100000 {
		var r RecordSpan
		r.newRootIDs()
		if !r.tid.IsValid() || !r.sid.IsValid() || seenT[r.tid] || seenS[r.sid] {
			t.Fatalf("record %d: ids %v %v (valid, unseen before)", i, r.tid, r.sid)
		}
		seenT[r.tid], seenS[r.sid] = true, true
	}
}

// OTEL_TRACES_SAMPLER_ARG is a ratio from 0 to 1: NaN (which strconv reads, and no
// comparison refuses) is refused naming it, not turned into a platform's conversion of
// NaN to a bound (all or nothing sampled); -0 is 0.
func TestSamplerArgNaNIsRefused(t *testing.T) {
	for _, name := range []string{"traceidratio", "parentbased_traceidratio"} {
		t.Setenv("OTEL_TRACES_SAMPLER", name)
		for _, arg := range []string{"NaN", "nan", "+NaN", "-nan", "Inf", "-inf", "1.0000001", "-0.1"} {
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", arg)
			if s, err := samplerFromEnv(); err == nil || !strings.Contains(err.Error(), `"`+arg+`"`) {
				t.Errorf("%s %q: sampler %v, error %v; want an error naming the value", name, arg, s, err)
			}
		}
		t.Setenv("OTEL_TRACES_SAMPLER_ARG", "-0")
		if s, err := samplerFromEnv(); err != nil || s.bound != 0 {
			t.Errorf("%s -0: %v %v", name, s, err)
		}
	}
}
