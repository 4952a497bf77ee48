package app

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/telemetry"
)

// tracingOn turns tracing on towards a collector that is never reached (nothing is
// exported unless a span ends).
func tracingOn(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
}

// The tracing section reaches the tracer at start-up; a reload that changes it is
// applied for every other key but leaves tracing as it runs, logging that the change
// needs a restart (as for the other keys read once at start-up).
func TestTracingKeysApplyAtStartAndNeedARestart(t *testing.T) {
	tracingOn(t)
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	writeConfig(t, path, b.URL(), "tracing:\n  segmentRecords: 500\n  propagateUnsampled: true")
	var logs logbuf.Buffer
	a, err := New(Options{ConfigPath: path, Version: "test", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	want := telemetry.TracingOptions{SegmentRecords: 500, SegmentInterval: time.Minute, PropagateUnsampled: true}
	if !a.tracing.Enabled || a.tracing.Options() != want {
		t.Fatalf("tracing on %v with %+v, want %+v from the file", a.tracing.Enabled, a.tracing.Options(), want)
	}

	writeConfig(t, path, b.URL(), "  pprof: true\ntracing:\n  segmentRecords: 7\n  propagateUnsampled: true")
	if err := a.Reload("test"); err != nil {
		t.Fatal(err)
	}
	if !a.snap.Load().cfg.Listen.Pprof {
		t.Fatal("the reload was not applied")
	}
	if a.tracing.Options() != want {
		t.Fatalf("after the reload tracing runs with %+v, want %+v until a restart", a.tracing.Options(), want)
	}
	out := logs.String()
	if !strings.Contains(out, "configuration change needs a restart") ||
		!strings.Contains(out, "tracing.segmentRecords: changed from 500 to 7; takes effect after a restart") {
		t.Fatalf("the log does not say the tracing change needs a restart:\n%s", out)
	}
	if strings.Contains(out, "tracing.propagateUnsampled") {
		t.Fatalf("an unchanged key is reported as changed:\n%s", out)
	}
}

// A variable the bridge no longer reads stops start-up and `bridge validate` alike,
// naming the variable, its value and the key to write instead.
func TestRetiredTracingVariableStopsStartUpAndValidate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	writeConfig(t, path, "pulsar://127.0.0.1:1", "")
	t.Setenv("BRIDGE_TRACE_SEGMENT_RECORDS", "2000")
	for name, run := range map[string]func() error{
		"start-up": func() error { a, err := New(Options{ConfigPath: path}); _ = closeApp(a); return err },
		"validate": func() error { return Validate(path) },
	} {
		err := run()
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), `BRIDGE_TRACE_SEGMENT_RECORDS="2000"`) ||
			!strings.Contains(err.Error(), "tracing.segmentRecords") {
			t.Fatalf("%s: err = %v, want one naming BRIDGE_TRACE_SEGMENT_RECORDS, 2000 and tracing.segmentRecords", name, err)
		}
	}
}

func closeApp(a *App) error {
	if a == nil {
		return nil
	}
	return a.Close()
}
