package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEmptyFileGivesTheDefaults(t *testing.T) {
	cfg, err := Parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("got %+v, want the defaults", cfg)
	}
}

func TestParseOverridesDefaults(t *testing.T) {
	t.Setenv("BRIDGE_TEST_TOKEN", "secret")
	cfg, err := Parse([]byte(`
listen:
  data: 0.0.0.0:8443
pulsar:
  url: pulsar+ssl://broker:6651
  token: env:BRIDGE_TEST_TOKEN
  operationTimeout: 10s
ingress:
  maxRecordBytes: 64MiB
  pendingBytes: 1024
  idleTimeout: 1h30m
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen.Data != "0.0.0.0:8443" || cfg.Listen.Ops != "127.0.0.1:9090" || cfg.Pulsar.OperationTimeout.D() != 10*time.Second ||
		cfg.Ingress.MaxRecordBytes != 64<<20 || cfg.Ingress.PendingBytes != 1024 || cfg.Ingress.IdleTimeout.D() != 90*time.Minute ||
		cfg.Ingress.MaxStreams != 1000 {
		t.Fatalf("got %+v", cfg)
	}
	if tok, _ := cfg.Pulsar.Token.Resolve(); tok != "secret" {
		t.Fatalf("token %q", tok)
	}
}

func TestParseErrorsNameTheLineKeyAndValue(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown key", "listen:\n  data: 127.0.0.1:1\n  dta: x\n", "line 3: field dta not found"},
		{"bad duration", "pulsar:\n  keepAlive: soon\n", `line 2: "soon" is not a duration`},
		{"bad size", "ingress:\n  maxRecordBytes: 4MB\n", `"4MB" is not a size`},
		{"wrong type", "ingress:\n  maxStreams: many\n", "line 2"},
		{"two documents", "listen: {}\n---\nlisten: {}\n", "more than one YAML document"},
		{"bad address", "listen:\n  ops: 9090\n", `listen.ops: "9090" is not host:port`},
		{"same address twice", "listen:\n  data: 127.0.0.1:9090\n", "listen.ops: \"127.0.0.1:9090\" is also listen.data"},
		{"bad scheme", "pulsar:\n  url: http://broker:8080\n", `scheme "http" is neither pulsar nor pulsar+ssl`},
		{"inline secret", "pulsar:\n  token: abc123\n", "pulsar.token: not a secret reference (value not shown)"},
		{"missing env", "pulsar:\n  token: env:BRIDGE_NO_SUCH_VARIABLE\n", "environment variable BRIDGE_NO_SUCH_VARIABLE is not set"},
		{"missing file", "pulsar:\n  tls:\n    caFile: /no/such/ca.pem\n", "pulsar.tls.caFile"},
		{"cert without key", "pulsar:\n  tls:\n    certFile: config_test.go\n", "certFile and keyFile go together"},
		{"zero", "ingress:\n  maxStreams: 0\n", "ingress.maxStreams: 0 must be greater than zero"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant it to mention %q", err, c.want)
			}
		})
	}
}

func TestInlineSecretIsNotEchoed(t *testing.T) {
	_, err := Parse([]byte("pulsar:\n  token: hunter2\n"))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err = %v: a secret written inline must not appear in the error", err)
	}
}

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	_, err := Parse([]byte("listen:\n  data: nope\npulsar:\n  url: ftp://x\ningress:\n  maxStreams: 0\n"))
	var p Problems
	if !errors.As(err, &p) || len(p) != 3 {
		t.Fatalf("err = %v, want three problems", err)
	}
}

func TestSecretFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("  tok \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := Secret("file:" + path)
	if v, err := s.Resolve(); err != nil || v != "tok" || s.File() != path {
		t.Fatalf("%q %v %q", v, err, s.File())
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resolve(); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Fatalf("empty file: %v", err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	os.WriteFile(path, []byte("listen:\n  bogus: 1\n"), 0o600)
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+":") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

func TestExampleFileIsValidAndSaysTheDefaults(t *testing.T) {
	cfg, err := Load("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("example.yaml says %+v, but the defaults are %+v", cfg, Default())
	}
}
