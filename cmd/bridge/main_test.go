package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestVersionPrintsVersionAndGoRuntime(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, &out, &errb); code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errb.String())
	}
	got := out.String()
	if !strings.HasPrefix(got, "bridge "+version+" ") || !strings.Contains(got, "go1.") {
		t.Fatalf("version output %q lacks the version %q or the Go runtime", got, version)
	}
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 2 {
		t.Fatalf("exit code %d, want 2", code)
	}
	if !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("stderr %q does not name the unknown command", errb.String())
	}
}

func TestValidateUsesTheStartUpPath(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", "../../config/example.yaml"}, &out, &errb); code != 0 {
		t.Fatalf("example.yaml: exit %d, %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "valid") {
		t.Fatalf("stdout %q", out.String())
	}
	bad := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(bad, []byte("ingress:\n  maxStreams: 0\n  unknownKey: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"validate", "-config", bad}, &out, &errb); code != 1 {
		t.Fatalf("bad file: exit %d", code)
	}
	if !strings.Contains(errb.String(), bad+":3: ingress.unknownKey: unknown key") {
		t.Fatalf("stderr %q does not name the line and key", errb.String())
	}
	if code := run([]string{"validate"}, &out, &errb); code != 2 {
		t.Fatalf("no -config: exit %d, want 2", code)
	}
}

func TestValidateCompilesTheRoutes(t *testing.T) {
	bad := t.TempDir() + "/routes.yaml"
	if err := os.WriteFile(bad, []byte("routes:\n  - name: r\n    default: {topic: \"t-{json:type}\"}\n  - name: r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", bad}, &out, &errb); code != 1 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{`routes[1].name: "r" is also the name of routes[0]`, "routes[1].default: missing"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}
	// Template problems are found by compiling, as start-up does.
	if err := os.WriteFile(bad, []byte("routes:\n  - name: r\n    default: {topic: \"t-{json:type}\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"validate", "-config", bad}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "is a template; list the namespaces") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

func TestValidateChecksTheMemoryKeys(t *testing.T) {
	bad := t.TempDir() + "/memory.yaml"
	if err := os.WriteFile(bad, []byte("memory:\n  budget: 300MiB\n  limit: 512MiB\npulsar:\n  maxProducers: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", bad}, &out, &errb); code != 1 {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{"memory.budget: 314572800 bytes is more than half of memory.limit", "pulsar.maxProducers: 0 must be greater than zero"} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}
}

// The OTLP exporter's environment is checked as start-up checks it: a variable it
// would refuse fails validate, and so does a removed tracing key, saying what to do.
func TestValidateChecksTheTracingEnvironment(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")
	var out, errb bytes.Buffer
	plain := write("plain.yaml", "tracing:\n  segmentRecords: 100\n")
	if code := run([]string{"validate", "-config", plain}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), `OTEL_EXPORTER_OTLP_TIMEOUT "10s"`) {
		t.Fatalf("a bad OTLP timeout: exit %d, stderr %q", code, errb.String())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "10000")
	errb.Reset()
	if code := run([]string{"validate", "-config", plain}, &out, &errb); code != 0 {
		t.Fatalf("a good OTLP timeout: exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"validate", "-config", write("old.yaml", "tracing:\n  exporter: wire\n")}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "tracing.exporter: removed") || !strings.Contains(errb.String(), "delete the key") {
		t.Fatalf("a removed key: exit %d, stderr %q", code, errb.String())
	}
}

func TestValidateChecksMaxPendingChunkedMessages(t *testing.T) {
	bad := t.TempDir() + "/chunks.yaml"
	if err := os.WriteFile(bad, []byte("streams:\n  - name: s\n    topics: [t]\n    maxPendingChunkedMessages: -3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"validate", "-config", bad}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "streams[0].maxPendingChunkedMessages: -3 must be within 1..10000") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
