package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
// its shell commands (the bridge started in the background, the rio function, the curl
// POST, then the curl -N GET), changing only the broker's URL and the listen ports, with
// the built binary as bin/bridge in a temporary directory; the receipts must have the
// shape the README shows and the GET must return the UPDATE record it shows.
func TestReadmeQuickStartWorksAsWritten(t *testing.T) {
	b := broker.Get(t)
	bin := bridgeBin(t)
	blocks := quickStart(t)
	cfg := find(t, blocks, "yaml", "routes:")
	run := find(t, blocks, "sh", "rio()")
	get := find(t, blocks, "sh", "curl -sSN")
	wantReceipts := find(t, blocks, "", `"summary":true`)
	wantRecord := find(t, blocks, "", `"type":"UPDATE"`)

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

	// The README's commands as one script; it waits for the bridge it started in the
	// background, so ending its process group ends the bridge too.
	const done = "--- quick start done ---"
	// Files, not pipes: the bridge in the background inherits them, and the shell's exit
	// must be seen without waiting for the bridge to close a pipe.
	stdout, stderr := outFile(t, dir, "stdout"), outFile(t, dir, "stderr")
	sh := exec.Command("bash", "-c", "set -e -o pipefail\n"+rewrite.Replace(run)+"\necho '"+done+"'\nwait\n")
	sh.Dir, sh.Stdout, sh.Stderr = dir, stdout.f, stderr.f
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
			t.Fatalf("the quick start's commands ended (%v) before the POST was answered:\n%s", exitErr, stdout.String())
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
	got := decodeJSONRecords(t, "the POST's answer", []byte(strings.TrimPrefix(out, valid)))
	want := decodeJSONRecords(t, "README's receipts", []byte(strings.TrimSpace(wantReceipts)))
	if len(got) != len(want) {
		t.Fatalf("%d receipts, the README shows %d:\n%s", len(got), len(want), out)
	}
	id := regexp.MustCompile(`^[0-9]+:[0-9]+:-1:-?[0-9]+$`)
	for i := range want {
		for k, v := range want[i] {
			if k == "messageId" {
				if s, _ := got[i][k].(string); !id.MatchString(s) {
					t.Errorf("receipt %d: messageId %v is not a message id of a non-partitioned topic", i, got[i][k])
				}
				continue
			}
			if fmt.Sprint(got[i][k]) != fmt.Sprint(v) {
				t.Errorf("receipt %d: %s is %v, the README shows %v", i, k, got[i][k], v)
			}
		}
		for k := range got[i] {
			if _, ok := want[i][k]; !ok {
				t.Errorf("receipt %d has %s, which the README does not show", i, k)
			}
		}
	}

	// The GET stays open: its first record is read, then it is ended.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	curl := exec.CommandContext(ctx, "bash", "-c", rewrite.Replace(strings.TrimSpace(get)))
	curl.Dir = dir
	pipe, err := curl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := curl.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = curl.Wait() }()
	rec, err := recordio.NewReader(bufio.NewReader(pipe)).Next()
	if err != nil {
		t.Fatalf("the GET: %v", err)
	}
	shown := decodeJSONRecords(t, "README's GET", []byte(strings.TrimSpace(wantRecord)))
	if len(shown) != 1 {
		t.Fatalf("the README shows %d records for the GET, want 1", len(shown))
	}
	wantRec, _ := json.Marshal(shown[0])
	var gotRec map[string]any
	if err := json.Unmarshal(rec, &gotRec); err != nil {
		t.Fatalf("the GET's record %q: %v", rec, err)
	}
	if g, _ := json.Marshal(gotRec); !bytes.Equal(g, wantRec) {
		t.Errorf("the GET's first record is %s, the README shows %s", rec, wantRec)
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
