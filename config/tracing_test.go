package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestTracingDefaultsAndValues(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Tracing{SegmentRecords: 10000, SegmentInterval: Duration(time.Minute)}); cfg.Tracing != want {
		t.Fatalf("tracing defaults %+v, want %+v", cfg.Tracing, want)
	}
	cfg, err = Parse([]byte("tracing:\n  segmentRecords: 500\n  segmentInterval: 30s\n  propagateUnsampled: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Tracing{SegmentRecords: 500, SegmentInterval: Duration(30 * time.Second), PropagateUnsampled: true}); cfg.Tracing != want {
		t.Fatalf("tracing %+v, want %+v", cfg.Tracing, want)
	}
}

// Each bad tracing value is refused with an error naming its key and the value.
func TestTracingBadValuesNameKeyAndValue(t *testing.T) {
	cases := []struct{ name, yaml, key, value string }{
		{"zero records", "tracing:\n  segmentRecords: 0\n", "tracing.segmentRecords", "0"},
		{"negative records", "tracing:\n  segmentRecords: -5\n", "tracing.segmentRecords", "-5"},
		{"records not a number", "tracing:\n  segmentRecords: lots\n", "segmentRecords", "lots"},
		{"zero interval", "tracing:\n  segmentInterval: 0s\n", "tracing.segmentInterval", "0s"},
		{"negative interval", "tracing:\n  segmentInterval: -1m\n", "segmentInterval", "-1m"},
		{"interval not a duration", "tracing:\n  segmentInterval: soon\n", "segmentInterval", "soon"},
		{"interval without unit", "tracing:\n  segmentInterval: 60\n", "segmentInterval", "60"},
		{"propagate not a bool", "tracing:\n  propagateUnsampled: sometimes\n", "propagateUnsampled", "sometimes"},
		{"unknown key", "tracing:\n  segmentRecord: 5\n", "tracing.segmentRecord", "unknown key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.value) {
				t.Fatalf("err = %v\nwant it to name %q and %q", err, c.key, c.value)
			}
		})
	}
}

// A variable the bridge used to read is refused while set, naming the variable, its
// value and the key that replaced it; an empty one (never a setting) is not.
func TestRetiredTracingVariablesAreRefused(t *testing.T) {
	for _, c := range []struct{ name, value, key string }{
		{"BRIDGE_TRACE_SEGMENT_RECORDS", "2000", "tracing.segmentRecords"},
		{"BRIDGE_TRACE_SEGMENT_INTERVAL", "30s", "tracing.segmentInterval"},
		{"BRIDGE_TRACE_PROPAGATE_UNSAMPLED", "true", "tracing.propagateUnsampled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.name, "")
			if _, err := Parse(nil); err != nil {
				t.Fatalf("%s set empty: %v", c.name, err)
			}
			t.Setenv(c.name, c.value)
			_, err := Parse(nil)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%s=%s: err = %v, want ErrInvalid", c.name, c.value, err)
			}
			if want := c.name + `="` + c.value + `"`; !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("err = %v\nwant it to name %s and %s", err, want, c.key)
			}
		})
	}
}

// Tracing is set up once: a reload changing any of its keys is logged as needing a
// restart.
func TestRestartNeededListsTracingKeys(t *testing.T) {
	a := Default()
	b := a
	b.Tracing = Tracing{SegmentRecords: 5, SegmentInterval: Duration(time.Second), PropagateUnsampled: true}
	got := strings.Join(RestartNeeded(a, b), "\n")
	for _, want := range []string{
		"tracing.segmentRecords: changed from 10000 to 5; takes effect after a restart",
		"tracing.segmentInterval: changed from 1m0s to 1s; takes effect after a restart",
		"tracing.propagateUnsampled: changed from false to true; takes effect after a restart",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("RestartNeeded says\n%s\nwant the line %q", got, want)
		}
	}
	if got := RestartNeeded(a, a); len(got) != 0 {
		t.Fatalf("no change: %q", got)
	}
}

// A configuration that still names tracing.exporter or tracing.recordSpans, whatever the
// value (the old defaults included), is refused with a message naming the key, saying it
// was removed and what to do, rather than the decoder's "field not found".
func TestRemovedTracingKeysAreRefusedSayingWhatToDo(t *testing.T) {
	for _, c := range []struct{ yaml, key, advice string }{
		{"tracing:\n  exporter: wire\n", "tracing.exporter: removed", "delete the key"},
		{"tracing:\n  exporter: sdk\n", "tracing.exporter: removed", "delete the key"},
		{"tracing:\n  recordSpans: direct\n", "tracing.recordSpans: removed", "delete the key"},
		{"tracing:\n  recordSpans: sdk\n  segmentRecords: 5\n", "tracing.recordSpans: removed", "delete the key"},
	} {
		_, err := Parse([]byte(c.yaml))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), c.advice) ||
			strings.Contains(err.Error(), "not found") {
			t.Errorf("%q: err = %v\nwant it to say %q and %q", c.yaml, err, c.key, c.advice)
		}
	}
	if got := RestartNeeded(Default(), Default()); len(got) != 0 {
		t.Fatalf("no change: %q", got)
	}
}
