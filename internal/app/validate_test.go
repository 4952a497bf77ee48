package app

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// problemsOf is the Problems an error carries, or fails the test.
func problemsOf(t *testing.T, what string, err error) config.Problems {
	t.Helper()
	var p config.Problems
	if !errors.As(err, &p) {
		t.Fatalf("%s: %v is not config.Problems", what, err)
	}
	return p
}

// `bridge validate` is start-up without binding: for every file start-up refuses it
// refuses the same, problem for problem, the start-up-only tracing environment included,
// and a file it passes gets as far as binding the listeners.
func TestStartUpRefusesExactlyWhatValidateRefuses(t *testing.T) {
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	dir := t.TempDir()
	cases := map[string]struct {
		text string
		n    int // problems
	}{
		"port out of range": {"listen:\n  data: 127.0.0.1:99999\n", 1},
		"unknown key":       {"listen:\n  opz: 127.0.0.1:1\n", 1},
		"decoding and semantic problems together": {"listen:\n  opz: x\ningress:\n  maxStreams: 0\n  idleTimeout: soon\n" +
			"routes:\n  - name: r\n    rules:\n      - key: \"{json:\"\n    default: {topic: t}\n", 4},
		"a template that does not compile":        {"routes:\n  - name: r\n    default: {topic: \"t-{json:a\"}\n", 1},
		"the tracing environment (start-up only)": {"tracing:\n  segmentRecords: 100\n", 1},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if name == "the tracing environment (start-up only)" {
				t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
			}
			path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
				t.Fatal(err)
			}
			verr := Validate(path)
			a, nerr := New(Options{ConfigPath: path})
			if a != nil {
				t.Fatal("New accepted a file Validate refuses")
			}
			vp, np := problemsOf(t, "Validate", verr), problemsOf(t, "New", nerr)
			if len(vp) != c.n || !reflect.DeepEqual(vp, np) {
				t.Fatalf("validate reports (want %d problems)\n%v\nstart-up reports\n%v", c.n, vp, np)
			}
		})
	}

	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	path := filepath.Join(dir, "busy.yaml")
	text := "listen:\n  data: " + busy.Addr().String() + "\n  ops: 127.0.0.1:0\npulsar:\n  url: " + b.URL() + "\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Validate(path); err != nil {
		t.Fatalf("a port in use is for start-up to find: %v", err)
	}
	if _, err := New(Options{ConfigPath: path}); err == nil || !strings.HasPrefix(err.Error(), "listen.data: ") {
		t.Fatalf("start-up on a port in use: %v, want a listen.data error", err)
	}
}
