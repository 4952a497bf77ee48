package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// fence is one fenced block of a Markdown file: its info string and its text.
type fence struct{ lang, text string }

// quickStart returns the fenced blocks of README.md's quick start section, in order.
func quickStart(t *testing.T) []fence {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Quick start")
	if i < 0 {
		t.Fatal("README.md has no Quick start section")
	}
	s = s[i+1:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	var out []fence
	for {
		start := strings.Index(s, "```")
		if start < 0 {
			return out
		}
		nl := strings.IndexByte(s[start:], '\n')
		lang := strings.TrimSpace(s[start+3 : start+nl])
		rest := s[start+nl+1:]
		end := strings.Index(rest, "```")
		if end < 0 {
			t.Fatal("README.md: an unclosed fence in the quick start")
		}
		out = append(out, fence{lang: lang, text: rest[:end]})
		s = rest[end+3:]
	}
}

// find returns the first block of lang containing want.
func find(t *testing.T, blocks []fence, lang, want string) string {
	t.Helper()
	for _, b := range blocks {
		if b.lang == lang && strings.Contains(b.text, want) {
			return b.text
		}
	}
	t.Fatalf("README.md's quick start has no %q block with %q", lang, want)
	return ""
}

// TestReadmeQuickStartWorksAsWritten runs README.md's quick start: its configuration and
// its shell commands (the bridge started in the background, bridge publish of the two
// events, bridge tail -n 1, the curl POST showing the wire format), changing only the
// broker's URL and the listen ports (the commands find the bridge through $BRIDGE_URL),
// with the built binary as bin/bridge in a temporary directory. Each command's output
// must have the shape the README shows: the same receipts field by field (message ids
// of the same form), the same summary, the same record read back.
func TestReadmeQuickStartWorksAsWritten(t *testing.T) {
	b := broker.Get(t)
	bin := bridgeBin(t)
	blocks := quickStart(t)
	cfg := find(t, blocks, "yaml", "routes:")
	run := find(t, blocks, "sh", "bridge run")
	tailCmd := find(t, blocks, "sh", "bridge tail")
	curlCmd := find(t, blocks, "sh", "curl -sS --data-binary")
	wantPublish := find(t, blocks, "", `"outcome"`)
	wantTail := find(t, blocks, "", `"type":"UPDATE"`)
	wantWire := find(t, blocks, "", `"summary":true`)
	if !strings.Contains(run, "bin/bridge publish") {
		t.Fatalf("the quick start's first commands do not publish with bin/bridge publish:\n%s", run)
	}

	ports, err := broker.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	data, ops := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	rewrite := strings.NewReplacer("pulsar://127.0.0.1:6650", b.URL, "127.0.0.1:8080", data, "127.0.0.1:9090", ops)
	if !strings.Contains(cfg, "url: pulsar://127.0.0.1:6650") {
		t.Fatalf("the quick start's configuration does not name pulsar://127.0.0.1:6650:\n%s", cfg)
	}
	cfg = rewrite.Replace(cfg) + fmt.Sprintf("listen:\n  data: %s\n  ops: %s\n", data, ops)
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "bridge")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bridge.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "BRIDGE_URL=http://"+data)

	// The README's first commands as one script; it waits for the bridge it started in
	// the background, so ending its process group ends the bridge too.
	const done = "--- quick start done ---"
	// Files, not pipes: the bridge in the background inherits them, and the shell's exit
	// must be seen without waiting for the bridge to close a pipe.
	stdout, stderr := outFile(t, dir, "stdout"), outFile(t, dir, "stderr")
	sh := exec.Command("bash", "-c", "set -e -o pipefail\n"+rewrite.Replace(run)+"\necho '"+done+"'\nwait\n")
	sh.Dir, sh.Stdout, sh.Stderr, sh.Env = dir, stdout.f, stderr.f, env
	sh.SysProcAttr = diesWithParent()
	if sh.SysProcAttr == nil {
		sh.SysProcAttr = &syscall.SysProcAttr{}
	}
	sh.SysProcAttr.Setpgid = true
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = sh.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("the commands' stderr:\n%s", tail(stderr.String(), 40))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stdout.String(), done) {
		select {
		case <-exited:
			t.Fatalf("the quick start's commands ended (%v) before bridge publish finished:\n%s", exitErr, stdout.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the quick start's commands did not finish within 60s:\n%s", stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	out := strings.TrimSuffix(stdout.String(), done+"\n")
	const valid = "bridge.yaml: valid\n"
	if !strings.HasPrefix(out, valid) {
		t.Fatalf("bridge validate should say %q first; the output is:\n%s", valid, out)
	}
	// The README shows what the terminal shows: the receipts (stdout), then the summary
	// (stderr, out of the receipts' way).
	var shownReceipts, shownSummary []string
	for _, l := range strings.Split(strings.TrimSpace(wantPublish), "\n") {
		if strings.HasPrefix(l, "{") {
			shownReceipts = append(shownReceipts, l)
		} else {
			shownSummary = append(shownSummary, l)
		}
	}
	sameShape(t, "bridge publish's receipts", jsonLines(t, "bridge publish's output", strings.TrimPrefix(out, valid)),
		jsonLines(t, "README's receipts", strings.Join(shownReceipts, "\n")))
	for _, l := range shownSummary {
		if !strings.Contains(stderr.String(), l+"\n") {
			t.Errorf("bridge publish did not say %q; its stderr:\n%s", l, tail(stderr.String(), 20))
		}
	}

	// bridge tail -n 1 reads the UPDATE event and ends by itself.
	got := runQuickStartCommand(t, dir, env, rewrite.Replace(strings.TrimSpace(tailCmd)))
	if g, w := jsonLines(t, "bridge tail's output", got), jsonLines(t, "README's record", wantTail); len(g) != 1 || len(w) != 1 || !reflect.DeepEqual(g[0], w[0]) {
		t.Errorf("bridge tail printed %q, the README shows %q", got, wantTail)
	}

	// The curl POST answers in RecordIO, as shown.
	got = runQuickStartCommand(t, dir, env, rewrite.Replace(strings.TrimSpace(curlCmd)))
	sameShape(t, "curl's answer", decodeJSONRecords(t, "curl's answer", []byte(got)),
		decodeJSONRecords(t, "README's answer", []byte(strings.TrimSpace(wantWire))))
}

// runQuickStartCommand runs one of the quick start's commands to its end (30 s at most)
// and returns its stdout.
func runQuickStartCommand(t *testing.T, dir string, env []string, command string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", "set -e -o pipefail\n"+command)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout: %s\nstderr: %s", command, err, out.String(), errb.String())
	}
	return out.String()
}

// jsonLines decodes text of one JSON object a line.
func jsonLines(t *testing.T, what, text string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%s: line %q: %v\n%s", what, l, err, text)
		}
		out = append(out, m)
	}
	return out
}

// sameShape holds got to the README's want: the same records with the same fields and
// values, a message id only of the same form (a non-partitioned topic's).
func sameShape(t *testing.T, what string, got, want []map[string]any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d records, the README shows %d:\n%v", what, len(got), len(want), got)
	}
	id := regexp.MustCompile(`^[0-9]+:[0-9]+:-1:-?[0-9]+$`)
	for i := range want {
		for k, v := range want[i] {
			if k == "messageId" {
				if s, _ := got[i][k].(string); !id.MatchString(s) {
					t.Errorf("%s %d: messageId %v is not a message id of a non-partitioned topic", what, i, got[i][k])
				}
				continue
			}
			if fmt.Sprint(got[i][k]) != fmt.Sprint(v) {
				t.Errorf("%s %d: %s is %v, the README shows %v", what, i, k, got[i][k], v)
			}
		}
		for k := range got[i] {
			if _, ok := want[i][k]; !ok {
				t.Errorf("%s %d has %s, which the README does not show", what, i, k)
			}
		}
	}
}

// outFile is a file a command writes to and the test reads as it grows.
type outFileT struct {
	f    *os.File
	path string
}

func outFile(t *testing.T, dir, name string) *outFileT {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &outFileT{f: f, path: path}
}

func (o *outFileT) String() string {
	b, _ := os.ReadFile(o.path)
	return string(b)
}

// decodeJSONRecords decodes RecordIO text of JSON records, checking its length prefixes.
func decodeJSONRecords(t *testing.T, what string, b []byte) []map[string]any {
	t.Helper()
	rd := recordio.NewReader(bytes.NewReader(b))
	var out []map[string]any
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s is not RecordIO: %v\n%s", what, err, b)
		}
		var m map[string]any
		if err := json.Unmarshal(rec, &m); err != nil {
			t.Fatalf("%s: record %q: %v", what, rec, err)
		}
		out = append(out, m)
	}
}
