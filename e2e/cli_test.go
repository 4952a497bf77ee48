package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// runCLI runs the built binary with args and returns its stdout, stderr and exit status.
func runCLI(t *testing.T, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return runCLIEnv(t, timeout, nil, args...)
}

// runCLIEnv is runCLI with extra environment variables (KEY=VALUE).
func runCLIEnv(t *testing.T, timeout time.Duration, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bridgeBin(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		code = exit.ExitCode()
	default:
		t.Fatalf("bridge %s: %v (timeout %v)\nstderr: %s", strings.Join(args, " "), err, timeout, tail(errb.String(), 20))
	}
	return out.String(), errb.String(), code
}

// TestBridgePublishAndTailAHundredThousandLines: a 100 000-line file published with
// bridge publish as a named stream comes back equal, byte for byte and in order, from
// bridge tail -n 100000 -ack client; published again with the same stream name and
// sequence, every line is a duplicate; and the subscription's backlog is 0 after the
// tail, so nothing was stored twice and everything printed was acknowledged.
func TestBridgePublishAndTailAHundredThousandLines(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "cli")
	b.SetDeduplication(t, ns, true)
	topic := "persistent://" + ns + "/" + broker.Name("lines")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: lines
    namespaces: [%s]
    default: {topic: %s}
streams:
  - name: lines
    topics: [%s]
    position: earliest
    overrides: [ack, subscription]
`, b.URL, ns, topic, topic))

	const n = 100_000
	var file bytes.Buffer
	for i := range n {
		// Lines of varied length, with escapes and text beyond ASCII, as an event log has.
		fmt.Fprintf(&file, `{"i":%d,"type":"UPDATE","note":"caf\u00e9 \"%s\" ✓","pad":"%s"}`+"\n", i, strings.Repeat("q", i%7), strings.Repeat("x", i%97))
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, file.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	out, errOut, code := runCLI(t, 5*time.Minute, "publish", "-url", p.DataURL, "-stream-name", "cli-e2e", "-sequence", "0", "lines", path)
	took := time.Since(start)
	if code != 0 {
		t.Fatalf("publish: exit %d\nstdout %s\nstderr %s", code, out, tail(errOut, 20))
	}
	if want := "bridge publish: 100000 records: 100000 published (0 duplicates), 0 refused; next sequence 100000\n"; out != want {
		t.Fatalf("publish: stdout %q, want %q", out, want)
	}
	if errOut != "" {
		t.Errorf("publish: stderr %q, want nothing (no terminal, so no progress line)", errOut)
	}
	t.Logf("published %d lines in %v", n, took.Round(time.Millisecond))

	// The same file again under the same name and numbers: the broker has every record.
	out, errOut, code = runCLI(t, 5*time.Minute, "publish", "-url", p.DataURL, "-stream-name", "cli-e2e", "-sequence", "0", "lines", path)
	if want := "bridge publish: 100000 records: 100000 published (100000 duplicates), 0 refused; next sequence 100000\n"; code != 0 || out != want {
		t.Fatalf("publish again: exit %d, stdout %q (want %q), stderr %s", code, out, want, tail(errOut, 20))
	}

	sub := broker.Name("tail")
	start = time.Now()
	out, errOut, code = runCLI(t, 5*time.Minute, "tail", "-url", p.DataURL, "-subscription", sub, "-ack", "client", "-n", fmt.Sprint(n), "lines")
	if code != 0 {
		t.Fatalf("tail: exit %d, stderr %s", code, tail(errOut, 20))
	}
	if out != file.String() {
		got, want := strings.Split(out, "\n"), strings.Split(file.String(), "\n")
		for i := range min(len(got), len(want)) {
			if got[i] != want[i] {
				t.Fatalf("tail: %d lines, the file %d; line %d is %q, the file's %q", len(got)-1, len(want)-1, i+1, got[i], want[i])
			}
		}
		t.Fatalf("tail: %d lines, the file %d", len(got)-1, len(want)-1)
	}
	t.Logf("tailed %d lines back in %v", n, time.Since(start).Round(time.Millisecond))
	waitBacklog(t, b, topic, sub, 0)
}

// TestBridgePublishNamesARefusedLineAndPublishesTheRest: a line that is not JSON and a
// record the bridge refuses (its route needs a field it lacks) are each named by their
// line, everything else is published in order, and the exit statuses say what happened:
// 1 with refusals, 3 for a route the bridge does not have, 2 for a usage error; tail of a
// stream it does not have is 1.
func TestBridgePublishNamesARefusedLineAndPublishesTheRest(t *testing.T) {
	b := broker.Get(t)
	prefix := broker.Name("cli-kind")
	topic := "persistent://public/default/" + prefix + "-a"
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: events
    namespaces: [public/default]
    default: {topic: "%s-{json:kind}"}
streams:
  - name: a
    topics: [%s]
    position: earliest
`, b.URL, prefix, topic))
	path := filepath.Join(t.TempDir(), "events.jsonl")
	lines := []string{`{"kind":"a","n":1}`, ``, `{"kind":"a","n":`, `{"n":4}`, `{"kind":"a","n":5}`}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, time.Minute, "publish", "-url", p.DataURL, "events", path)
	if code != 1 {
		t.Fatalf("publish: exit %d, want 1\nstdout %s\nstderr %s", code, out, errOut)
	}
	for _, want := range []string{path + ":3: not published: not JSON: unexpected EOF", path + ":4: refused (422): "} {
		if !strings.Contains(errOut, want) {
			t.Errorf("publish: stderr %q lacks %q", errOut, want)
		}
	}
	if want := "bridge publish: 4 records: 2 published (0 duplicates), 2 refused\n"; out != want {
		t.Errorf("publish: stdout %q, want %q", out, want)
	}
	t.Logf("publish's stderr:\n%s", errOut)

	out, errOut, code = runCLI(t, time.Minute, "tail", "-url", p.DataURL, "-n", "2", "a")
	if want := lines[0] + "\n" + lines[4] + "\n"; code != 0 || out != want {
		t.Fatalf("tail: exit %d, stdout %q (want %q), stderr %s", code, out, want, errOut)
	}

	out, errOut, code = runCLI(t, time.Minute, "publish", "-url", p.DataURL, "nope", path)
	if code != 3 || !strings.Contains(errOut, `bridge publish: stopped: bridge answered 404: no route for "/v1/publish/nope"`) {
		t.Errorf("publish to a missing route: exit %d, want 3; stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code = runCLI(t, time.Minute, "tail", "-url", p.DataURL, "nope")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Errorf("tail of a missing stream: exit %d, want 1; stderr %q", code, errOut)
	}
	_, errOut, code = runCLI(t, time.Minute, "publish", "-url", p.DataURL, "-sequence", "3", "events", path)
	if code != 2 || !strings.Contains(errOut, "-sequence 3 needs -stream-name") {
		t.Errorf("a usage error: exit %d, want 2; stderr %q", code, errOut)
	}
}

// TestBridgePublishAndTailOverTLSWithTokens: against a bridge with TLS on its data
// listener and bearer tokens, bridge publish trusts the bridge's certificate with
// -ca-file and presents -token-file's token, bridge tail $BRIDGE_TOKEN's; without a token
// the bridge's 401 stops publish (exit 3) and fails tail (exit 1), naming the status.
func TestBridgePublishAndTailOverTLSWithTokens(t *testing.T) {
	b := broker.Get(t)
	dir := t.TempDir()
	certFile, keyFile, _ := writeCert(t, dir, 1)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte("tok-cli-5e1f\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	topic := b.Topic(t, "cli-tls")
	p := startBridge(t, fmt.Sprintf(`
  tls:
    certFile: %s
    keyFile: %s
pulsar:
  url: %s
auth:
  tokens:
    - name: cli
      file: %s
      routes: [in]
      streams: [out]
routes:
  - name: in
    default: {topic: %s}
streams:
  - name: out
    topics: [%s]
    position: earliest
`, certFile, keyFile, b.URL, tokenFile, topic, topic))
	url := strings.Replace(p.DataURL, "http://", "https://", 1)
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte("{\"over\":\"tls\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, time.Minute, "publish", "-url", url, "-ca-file", certFile, "-token-file", tokenFile, "in", in)
	if code != 0 || !strings.Contains(out, "1 records: 1 published") {
		t.Fatalf("publish: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runCLIEnv(t, time.Minute, []string{"BRIDGE_TOKEN=tok-cli-5e1f", "BRIDGE_URL=" + url}, "tail", "-ca-file", certFile, "-n", "1", "out")
	if code != 0 || out != "{\"over\":\"tls\"}\n" {
		t.Fatalf("tail: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code = runCLI(t, time.Minute, "publish", "-url", url, "-ca-file", certFile, "in", in)
	if code != 3 || !strings.Contains(errOut, "401") {
		t.Errorf("publish without a token: exit %d, want 3; stderr %q", code, errOut)
	}
	_, errOut, code = runCLI(t, time.Minute, "tail", "-url", url, "-ca-file", certFile, "out")
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Errorf("tail without a token: exit %d, want 1; stderr %q", code, errOut)
	}
}

// TestBridgePublishAndTailBinaryRecords: records that are not text (line feeds, bytes
// that are not UTF-8, an empty one) go through byte for byte: a RecordIO file published
// with -format recordio and two files with -format raw come back from bridge tail -o
// recordio as the same RecordIO stream.
func TestBridgePublishAndTailBinaryRecords(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "cli-bin")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: bin
    contentTypes: [application/x-protobuf]
    default: {topic: %s}
streams:
  - name: bin
    topics: [%s]
    position: earliest
    contentType: application/x-protobuf
`, b.URL, topic, topic))
	dir := t.TempDir()
	recs := [][]byte{{0x0a, 0x03, 'a', '\n', 'b'}, {}, {0xff, 0xfe, 0x00, '\r', '\n'}}
	var rio []byte
	for _, r := range recs {
		rio = recordio.AppendRecord(rio, r)
	}
	file := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	in := file("in.rio", rio)
	raw1, raw2 := file("one.bin", []byte{0x08, 0x96, 0x01}), file("two.bin", []byte("two\nlines\n"))
	ct := "application/x-protobuf"
	if out, errOut, code := runCLI(t, time.Minute, "publish", "-url", p.DataURL, "-format", "recordio", "-content-type", ct, "bin", in); code != 0 || !strings.Contains(out, "3 records: 3 published") {
		t.Fatalf("publish -format recordio: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out, errOut, code := runCLI(t, time.Minute, "publish", "-url", p.DataURL, "-format", "raw", "-content-type", ct, "bin", raw1, raw2); code != 0 || !strings.Contains(out, "2 records: 2 published") {
		t.Fatalf("publish -format raw: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	want := recordio.AppendRecord(recordio.AppendRecord(rio, []byte{0x08, 0x96, 0x01}), []byte("two\nlines\n"))
	out, errOut, code := runCLI(t, time.Minute, "tail", "-url", p.DataURL, "-o", "recordio", "-n", "5", "bin")
	if code != 0 || out != string(want) {
		t.Fatalf("tail -o recordio: exit %d, stdout %q, want %q; stderr %q", code, out, want, errOut)
	}
}
