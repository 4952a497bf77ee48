package config

import (
	"context"
	"errors"
	"fmt"
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
		{"unknown key", "listen:\n  data: 127.0.0.1:1\n  dta: x\n", "line 3: listen.dta: unknown key; the keys under listen are data, ops, pprof, tls"},
		{"bad duration", "pulsar:\n  keepAlive: soon\n", `line 2: pulsar.keepAlive: "soon" is not a duration`},
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
		{"jwt issuer incomplete", "auth:\n  jwt:\n    - name: idp\n      issuer: idp.example\n", `auth.jwt[0].issuer: "idp.example" is not an http(s) URL`},
		{"jwt without audience", "auth:\n  jwt:\n    - name: idp\n      issuer: https://idp.example/\n", "auth.jwt[0].audience: missing"},
		{"jwt with HS256", "auth:\n  jwt:\n    - name: idp\n      issuer: https://idp.example/\n      audience: b\n      algorithms: [RS256, HS256]\n", `auth.jwt[0].algorithms: "HS256" is not accepted`},
		{"jwt refresh too often", "auth:\n  jwt:\n    - name: idp\n      issuer: https://idp.example/\n      audience: b\n      keyRefreshInterval: 100ms\n", `line 6: auth.jwt[0].keyRefreshInterval: 100ms is not between 1s and 1h`},
		{"jwt with none", "auth:\n  jwt:\n    - name: idp\n      issuer: https://idp.example/\n      audience: b\n      algorithms: [none]\n", `"none" is not accepted`},
		{"tls authentication without a certificate", "pulsar:\n  url: pulsar+ssl://h:6651\n  tls:\n    authenticate: true\n", "pulsar.tls.authenticate: needs a client certificate"},
		{"tls authentication over plain TCP", "pulsar:\n  tls:\n    certFile: config_test.go\n    keyFile: config_test.go\n    authenticate: true\n", "needs a pulsar+ssl:// pulsar.url"},
		{"tls authentication and a token", "pulsar:\n  url: pulsar+ssl://h:6651\n  token: env:HOME\n  tls:\n    certFile: config_test.go\n    keyFile: config_test.go\n    authenticate: true\n", "pulsar.token or pulsar.oauth2 is set too"},
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
	if len(cfg.Routes) == 0 || len(cfg.Streams) == 0 {
		t.Fatal("example.yaml shows no route or no stream")
	}
	// The example stream spells out every default.
	if s := cfg.Streams[0]; !reflect.DeepEqual(Stream{Name: s.Name, Topics: s.Topics, Overrides: s.Overrides, HeartbeatInterval: s.HeartbeatInterval,
		Heartbeat: s.Heartbeat}.WithDefaults(), s.WithDefaults()) {
		t.Fatalf("the example stream differs from the defaults: %+v", s)
	}
	cfg.Routes, cfg.Streams = nil, nil
	if !reflect.DeepEqual(cfg, Default()) {
		t.Fatalf("example.yaml says %+v, but the defaults are %+v", cfg, Default())
	}
}

func TestRestartNeededListsEachField(t *testing.T) {
	a := Default()
	b := a
	b.Listen.Data = "127.0.0.1:1"
	b.Pulsar.Token = "env:OTHER"
	b.Ingress.MaxStreams = 5 // applied live: not listed
	got := RestartNeeded(a, b)
	if len(got) != 2 || !strings.Contains(got[0], `listen.data: changed from "127.0.0.1:8080" to "127.0.0.1:1"`) ||
		!strings.Contains(got[1], `pulsar.token: changed from "" to "env:OTHER"`) {
		t.Fatalf("%q", got)
	}
}

func TestWatchSeesAConfigMapSymlinkSwap(t *testing.T) {
	dir := t.TempDir()
	for _, gen := range []string{"..gen1", "..gen2"} {
		if err := os.Mkdir(filepath.Join(dir, gen), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, gen, "c.yaml"), []byte(gen), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..gen1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.yaml")
	if err := os.Symlink("..data/c.yaml", path); err != nil {
		t.Fatal(err)
	}
	changed, _ := startWatch(t, path)
	if err := os.Symlink("..gen2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change reported for a ..data symlink swap")
	}
	if b, _ := os.ReadFile(path); string(b) != "..gen2" {
		t.Fatalf("the file reads %q", b)
	}
}

// TestAckClientWithoutTheEnvelopeIsAllowed: with envelope none a client acknowledges by
// record position, so ack client no longer needs the JSON envelope.
func TestAckClientWithoutTheEnvelopeIsAllowed(t *testing.T) {
	if _, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    ack: client\n")); err != nil {
		t.Fatalf("ack client with envelope none: %v", err)
	}
}

type watchEvent struct {
	name    string
	counted bool
}

// startWatch watches path until the test ends and returns once the watch is set up:
// the changes it reports, and every event as it was judged.
func startWatch(t *testing.T, path string) (<-chan struct{}, <-chan watchEvent) {
	t.Helper()
	changed := make(chan struct{}, 100)
	events := make(chan watchEvent, 1000)
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- watch(ctx, path, 20*time.Millisecond, func() { changed <- struct{}{} }, watchHooks{
			ready: func() { close(ready) },
			seen:  func(name string, counted bool) { events <- watchEvent{filepath.Base(name), counted} },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the watch ended: %v", err)
	}
	return changed, events
}

// TestWatchIgnoresOtherFilesInTheDirectory: a log file written next to the configuration
// (where a refused reload's log line lands) does not trigger a reload; the configuration
// file itself does.
func TestWatchIgnoresOtherFilesInTheDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, events := startWatch(t, path)
	logf, err := os.OpenFile(filepath.Join(dir, "bridge.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	for i := range 5 {
		if _, err := fmt.Fprintf(logf, "configuration reload refused %d\n", i); err != nil {
			t.Fatal(err)
		}
		for ev := range events {
			if ev.name != "bridge.log" {
				t.Fatalf("unexpected event on %s", ev.name)
			}
			if ev.counted {
				t.Fatalf("write %d to the log file next to the configuration counts as a change", i)
			}
			if len(events) == 0 {
				break
			}
		}
	}
	if err := os.WriteFile(path, []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no change reported for a write to the configuration file")
	}
	for len(events) > 0 {
		if ev := <-events; ev.counted != (ev.name == "c.yaml") {
			t.Fatalf("%+v", ev)
		}
	}
}

func TestRetryIsValidated(t *testing.T) {
	for doc, want := range map[string]string{
		"retry: {maxDeliveries: 3}":                    "streams[0].retry.maxDeliveries: needs type shared or key_shared",
		"type: shared\n    retry: {maxDeliveries: -1}": "streams[0].retry.maxDeliveries: -1 must not be negative",
		"retry: {multiplier: 0.5}":                     "want 0 < initial <= max, multiplier >= 1",
		"retry: {initial: 5m, max: 1m}":                "want 0 < initial <= max",
		"retry: {jitter: 1.5}":                         "jitter within 0..1",
		"maxRate: -1":                                  "maxRate and maxByteRate must not be negative",
	} {
		_, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    " + doc + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	cfg, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    type: key_shared\n    retry: {maxDeliveries: 5, jitter: 0}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Streams[0].WithDefaults().Retry; r.MaxDeliveries != 5 || *r.Jitter != 0 || r.Initial.D() != time.Second || r.Multiplier != 1.6 || r.Max.D() != 2*time.Minute {
		t.Fatalf("%+v", r)
	}
}

// TestReceiverQueueBytes: streams[].receiverQueueBytes defaults to 1 MiB per partition,
// takes a size, and a value that is not a positive size is refused naming it.
func TestReceiverQueueBytes(t *testing.T) {
	cfg, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n  - name: u\n    topics: [t]\n    receiverQueueBytes: 256KiB\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Streams[0].WithDefaults().ReceiverQueueBytes; got != 1<<20 {
		t.Fatalf("default receiverQueueBytes %d, want 1MiB", got)
	}
	if got := cfg.Streams[1].WithDefaults().ReceiverQueueBytes; got != 256<<10 {
		t.Fatalf("receiverQueueBytes %d, want 256KiB", got)
	}
	for doc, want := range map[string]string{
		"receiverQueueBytes: -1MiB": `line 4: streams[0].receiverQueueBytes: "-1MiB" is not a size (write it like 4096, 64KiB, 4MiB or 1GiB)`,
		"receiverQueueBytes: lots":  `line 4: streams[0].receiverQueueBytes: "lots" is not a size (write it like 4096, 64KiB, 4MiB or 1GiB)`,
	} {
		_, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    " + doc + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	cfg = Default()
	cfg.Streams = []Stream{{Name: "s", Topics: []string{"t"}, ReceiverQueueBytes: -5}}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "streams[0].receiverQueueBytes: -5 must be greater than zero") {
		t.Fatalf("a negative receiverQueueBytes: %v", err)
	}
}

// TestMaxPendingChunkedMessages: streams[].maxPendingChunkedMessages defaults to 100 per
// partition; a value outside 1..10000 is refused naming the key and the value.
func TestMaxPendingChunkedMessages(t *testing.T) {
	cfg, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n  - name: u\n    topics: [t]\n    maxPendingChunkedMessages: 8\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Streams[0].WithDefaults().MaxPendingChunkedMessages; got != 100 {
		t.Fatalf("default maxPendingChunkedMessages %d, want 100", got)
	}
	if got := cfg.Streams[1].WithDefaults().MaxPendingChunkedMessages; got != 8 {
		t.Fatalf("maxPendingChunkedMessages %d, want 8", got)
	}
	for _, v := range []string{"-1", "10001"} {
		_, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    maxPendingChunkedMessages: " + v + "\n"))
		want := "streams[0].maxPendingChunkedMessages: " + v + " must be within 1..10000"
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("maxPendingChunkedMessages %s: %v, want %q", v, err, want)
		}
	}
}

func TestCryptoFailureIsValidatedAndDefaultsToFail(t *testing.T) {
	_, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]\n    cryptoFailure: consume\n"))
	if want := `streams[0].cryptoFailure: "consume" is not one of [fail discard deliver]`; !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Fatalf("%v, want %q", err, want)
	}
	for doc, want := range map[string]string{"": "fail", "\n    cryptoFailure: discard": "discard", "\n    cryptoFailure: deliver": "deliver"} {
		cfg, err := Parse([]byte("streams:\n  - name: s\n    topics: [t]" + doc + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Streams[0].WithDefaults().CryptoFailure; got != want {
			t.Errorf("%q: cryptoFailure %q, want %q", doc, got, want)
		}
	}
}

func TestOAuth2AndJWTIssuersAreValidatedWithoutShowingTheCredentials(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "oauth2.json")
	if err := os.WriteFile(good, []byte(`{"client_id": "bridge", "client_secret": "pa55-w0rd"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	notJSON := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(notJSON, []byte(`client_secret=pa55-w0rd`), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := "pulsar:\n  oauth2:\n    issuerUrl: https://idp.example/\n    privateKey: file:" + good + "\n    audience: urn:pulsar:cluster\n"
	cfg, err := Parse([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if o := cfg.Pulsar.OAuth2; !o.On() || o.IssuerURL != "https://idp.example/" || o.Audience != "urn:pulsar:cluster" || o.Scope != "" {
		t.Fatalf("parsed %+v", o)
	}
	for _, c := range []struct{ name, yaml, want string }{
		{"with a token", ok + "  token: env:HOME\n", "pulsar.oauth2: pulsar.token is set too"},
		{"no issuer", "pulsar:\n  oauth2:\n    privateKey: file:" + good + "\n", "pulsar.oauth2.issuerUrl"},
		{"issuer not http", "pulsar:\n  oauth2:\n    issuerUrl: idp.example\n    privateKey: file:" + good + "\n", `"idp.example" is not an http(s) URL`},
		{"no key", "pulsar:\n  oauth2:\n    issuerUrl: https://idp.example/\n", "pulsar.oauth2.privateKey: missing"},
		{"key not JSON", "pulsar:\n  oauth2:\n    issuerUrl: https://idp.example/\n    privateKey: file:" + notJSON + "\n", "invalid credentials file: not JSON"},
		{"key inline", "pulsar:\n  oauth2:\n    issuerUrl: https://idp.example/\n    privateKey: pa55-w0rd\n", "not a secret reference"},
		{"caFile missing", ok + "    caFile: /no/such/ca.pem\n", "pulsar.oauth2.caFile: open /no/such/ca.pem"},
		{"caFile not PEM", ok + "    caFile: " + good + "\n", "pulsar.oauth2.caFile: " + good + " holds no PEM certificate"},
		{"jwt caFile missing", "auth:\n  jwt:\n    - {name: idp, issuer: https://idp.example/, audience: b, caFile: /no/such/ca.pem}\n", "auth.jwt[0].caFile: open /no/such/ca.pem"},
		{"jwt caFile not PEM", "auth:\n  jwt:\n    - {name: idp, issuer: https://idp.example/, audience: b, caFile: " + good + "}\n", "auth.jwt[0].caFile: " + good + " holds no PEM certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.yaml))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v\nwant it to mention %q", err, c.want)
			}
			if strings.Contains(err.Error(), "pa55-w0rd") {
				t.Fatalf("err = %v shows the secret", err)
			}
		})
	}
}

// TestHashingSchemeDefaultsToTheJavaClients: a keyed message goes to the partition a Java
// producer with its default scheme would pick (javaString) unless murmur3 is asked for;
// anything else is refused.
func TestHashingSchemeDefaultsToTheJavaClients(t *testing.T) {
	if d := Default().Pulsar.HashingScheme; d != "javaString" {
		t.Fatalf("default %q", d)
	}
	cfg, err := Parse([]byte("pulsar:\n  hashingScheme: murmur3\n"))
	if err != nil || cfg.Pulsar.HashingScheme != "murmur3" {
		t.Fatalf("%+v %v", cfg.Pulsar, err)
	}
	_, err = Parse([]byte("pulsar:\n  hashingScheme: murmur\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `pulsar.hashingScheme: "murmur" is not one of javaString, murmur3`) {
		t.Fatalf("%v", err)
	}
}

// TestValidateChecksSchemaFieldsAgainstTheirType: each schema type takes only its own
// fields, so a misplaced one is reported instead of ignored.
func TestValidateChecksSchemaFieldsAgainstTheirType(t *testing.T) {
	_, err := Parse([]byte(`
routes:
  - name: a
    schema: {type: protobuf}
    rules:
      - topic: b
        schema: {type: protobuf_native}
      - topic: c
        schema: {type: json}
      - topic: d
        schema: {type: avro, definition: x, file: y}
      - topic: e
        schema: {type: string, message: m, validate: true}
      - topic: f
        schema: {validate: true}
    default: {topic: d}
`))
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("Parse: %v, want problems", err)
	}
	got := p.Error()
	for _, want := range []string{
		`routes[0].schema.type: "protobuf" is not a schema type`,
		"routes[0].rules[0].schema.message: missing",
		"routes[0].rules[1].schema: a json schema needs its Avro record definition",
		"routes[0].rules[2].schema: give the definition inline or in a file, not both",
		"routes[0].rules[3].schema.message: only a protobuf_native schema has a message type",
		"routes[0].rules[4].schema.validate: a schema of type none has nothing to validate",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem %q in:\n%s", want, got)
		}
	}
}

// Named streams' producers share their topics unless exclusiveWithFencing is asked for;
// anything else is refused.
func TestNamedStreamAccessModeIsSharedUnlessFencingIsAskedFor(t *testing.T) {
	if d := Default().Pulsar.NamedStreamAccessMode; d != "shared" {
		t.Fatalf("default %q", d)
	}
	cfg, err := Parse([]byte("pulsar:\n  namedStreamAccessMode: exclusiveWithFencing\n"))
	if err != nil || cfg.Pulsar.NamedStreamAccessMode != "exclusiveWithFencing" {
		t.Fatalf("%+v %v", cfg.Pulsar, err)
	}
	_, err = Parse([]byte("pulsar:\n  namedStreamAccessMode: exclusive\n"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `pulsar.namedStreamAccessMode: "exclusive" is not one of shared, exclusiveWithFencing`) {
		t.Fatalf("%v", err)
	}
}

// A route may not copy a caller's credentials (Authorization, Proxy-Authorization,
// Cookie, in any case) into what it publishes, where every reader of the topic would
// get them: each copy is refused at its line, naming the key and the value.
func TestARouteCopyingCredentialHeadersIntoMessagesIsRefused(t *testing.T) {
	doc := `routes:
  - name: r
    headers: [x-request-id, AUTHORIZATION]
    namespaces: [public/default]
    properties:
      caller: "{header:authorization}"
      trace: "{header:traceparent}"
    rules:
      - match: {headers: {authorization: [x]}}
        topic: t-{header:Cookie}
        key: "{header: Proxy-Authorization}"
    default:
      topic: t
      key: "k-{header:x-tenant}-{header:Authorization}"
      properties:
        session: "{header:cookie}"
`
	_, err := Parse([]byte(doc))
	var p Problems
	if !errors.As(err, &p) {
		t.Fatalf("err = %v, want Problems", err)
	}
	want := []string{
		`line 3: routes[0].headers[1]: "AUTHORIZATION" copies the request's Authorization header into every message's properties`,
		`line 6: routes[0].properties.caller: "{header:authorization}" copies the request's Authorization header`,
		`line 10: routes[0].rules[0].topic: "t-{header:Cookie}" copies the request's Cookie header`,
		`line 11: routes[0].rules[0].key: "{header: Proxy-Authorization}" copies the request's Proxy-Authorization header`,
		`line 14: routes[0].default.key: "k-{header:x-tenant}-{header:Authorization}" copies the request's Authorization header`,
		`line 16: routes[0].default.properties.session: "{header:cookie}" copies the request's Cookie header`,
	}
	if len(p) != len(want) {
		t.Fatalf("%d problems, want %d:\n%v", len(p), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(p[i].String(), w) || !strings.Contains(p[i].String(), "published to every reader") {
			t.Errorf("problem %d: %s\nwant it to start with %s", i, p[i], w)
		}
	}
}

// Two auth.jwt entries for one issuer are refused: a token names one issuer, so the
// second entry (its audience, grants claim, keys) would never be used.
func TestTwoJWTIssuersOfTheSameIssuerAreRefused(t *testing.T) {
	doc := `auth:
  jwt:
    - {name: a, issuer: "https://idp.example/", audience: bridge}
    - {name: b, issuer: "https://idp.example/", audience: other}
    - {name: c, issuer: "https://idp.example", audience: bridge}
`
	_, err := Parse([]byte(doc))
	var p Problems
	if !errors.As(err, &p) || len(p) != 1 ||
		!strings.HasPrefix(p[0].String(), `line 4: auth.jwt[1].issuer: "https://idp.example/" is also the issuer of auth.jwt[0]`) {
		t.Fatalf("err = %v, want one problem at auth.jwt[1].issuer naming it and auth.jwt[0]", err)
	}
}
