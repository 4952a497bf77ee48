package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// fakeIngress answers POST /v1/publish/r as the bridge's streamed receipts do: 200 for
// each record, 422 for one containing "refuse", then the summary. It keeps what it got.
type fakeIngress struct {
	mu      sync.Mutex
	got     []string
	headers http.Header
}

func (f *fakeIngress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Answered at once, body read or not, as the bridge answers (net/http would
	// otherwise read the body's end before it wrote the status).
	_ = http.NewResponseController(w).EnableFullDuplex()
	if r.URL.Path != "/v1/publish/r" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		msg, _ := json.Marshal(fmt.Sprintf("no route for %q", r.URL.Path))
		fmt.Fprintf(w, `{"status":404,"error":%s}`, msg)
		return
	}
	f.mu.Lock()
	f.headers = r.Header.Clone()
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/recordio")
	w.WriteHeader(http.StatusOK)
	rw := recordio.NewWriter(w)
	rd := recordio.NewReader(r.Body)
	published, failed := 0, 0
	for seq := 0; ; seq++ {
		rec, err := rd.Next()
		if err != nil {
			break
		}
		f.mu.Lock()
		f.got = append(f.got, string(rec))
		f.mu.Unlock()
		var receipt string
		if bytes.Contains(rec, []byte("refuse")) {
			failed++
			receipt = fmt.Sprintf(`{"seq":%d,"status":422,"error":"the record has no field type"}`, seq)
		} else {
			published++
			receipt = fmt.Sprintf(`{"seq":%d,"status":200,"topic":"persistent://public/default/t","messageId":"1:%d:-1:0"}`, seq, seq)
		}
		_ = rw.Write([]byte(receipt))
		_ = rw.Flush()
		http.NewResponseController(w).Flush()
	}
	status := 200
	if failed > 0 {
		status = 422
	}
	_ = rw.Write(fmt.Appendf(nil, `{"summary":true,"records":%d,"published":%d,"failed":%d,"status":%d}`, published+failed, published, failed, status))
	_ = rw.Flush()
}

func (f *fakeIngress) records() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

// A record the bridge refuses and a line that is not JSON are each named by their line,
// the rest is published, the summary counts them, and the exit status says something
// was refused.
func TestPublishNamesEachRefusalByItsLineAndPublishesTheRest(t *testing.T) {
	f := &fakeIngress{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "in.jsonl")
	in := "{\"n\":1}\n{\"n\":2,\"refuse\":1}\nnot json\n\n{\"n\":5}\n"
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := cmdPublish([]string{"-url", srv.URL, "r", path, "-H", "X-Framework-Id: f-1"}, nil, &out, &errb, noEnv, nil)
	if code != exitRefused {
		t.Fatalf("exit %d, want %d; stderr %q", code, exitRefused, errb.String())
	}
	for _, want := range []string{
		path + ":2: refused (422): the record has no field type",
		path + `:3: not published: not JSON: invalid character 'o' in literal null (expecting 'u') in "not json"`,
	} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q lacks %q", errb.String(), want)
		}
	}
	if want := "bridge publish: 4 records: 2 published (0 duplicates), 2 refused\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
	if got := f.records(); strings.Join(got, "|") != `{"n":1}|{"n":2,"refuse":1}|{"n":5}` {
		t.Errorf("the bridge got %q", got)
	}
	if h := f.headers; h.Get("Message-Content-Type") != "application/json" || h.Get("X-Framework-Id") != "f-1" || h.Get("Stream-Name") != "" {
		t.Errorf("request headers %v", h)
	}
}

// Everything published is exit 0; -receipts prints each receipt as a JSON line naming
// the record, and the summary then goes to stderr, out of the receipts' way.
func TestPublishPrintsReceiptsAsJSONLines(t *testing.T) {
	srv := httptest.NewServer(&fakeIngress{})
	defer srv.Close()
	var out, errb bytes.Buffer
	code := cmdPublish([]string{"-url", srv.URL, "-receipts", "r"}, strings.NewReader("1\n2\n"), &out, &errb, noEnv, nil)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errb.String())
	}
	want := `{"record":"stdin:1","sequence":0,"status":200,"outcome":"persisted","topic":"persistent://public/default/t","messageId":"1:0:-1:0"}` + "\n" +
		`{"record":"stdin:2","sequence":1,"status":200,"outcome":"persisted","topic":"persistent://public/default/t","messageId":"1:1:-1:0"}` + "\n"
	if out.String() != want {
		t.Fatalf("stdout %q, want %q", out.String(), want)
	}
	if !strings.Contains(errb.String(), "2 records: 2 published") {
		t.Fatalf("stderr %q lacks the summary", errb.String())
	}
}

// A route the bridge does not have stops the publish: exit 3, the bridge's answer shown.
func TestPublishToAMissingRouteStops(t *testing.T) {
	srv := httptest.NewServer(&fakeIngress{})
	defer srv.Close()
	var out, errb bytes.Buffer
	code := cmdPublish([]string{"-url", srv.URL, "nope"}, strings.NewReader("1\n"), &out, &errb, noEnv, nil)
	if code != exitStopped || !strings.Contains(errb.String(), `404`) || !strings.Contains(errb.String(), `no route for "/v1/publish/nope"`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if !strings.Contains(out.String(), "1 without an answer") {
		t.Fatalf("stdout %q", out.String())
	}
}

// A refusal of the whole request stops the publish at once, also while the input is
// quiet (a pipe from a program that writes now and then).
func TestPublishStopsWhileTheInputIsQuiet(t *testing.T) {
	srv := httptest.NewServer(&fakeIngress{})
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() { done <- cmdPublish([]string{"-url", srv.URL, "nope"}, pr, &out, &errb, noEnv, nil) }()
	if _, err := io.WriteString(pw, "1\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitStopped || !strings.Contains(errb.String(), "404") {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish went on waiting for input after the bridge refused the request")
	}
	pw.Close() // the read still waiting returns, and its goroutine with it
}

// With a stream name the records carry their numbers from -sequence on, and the summary
// says which number comes next.
func TestPublishNamedStreamStartsAtSequence(t *testing.T) {
	f := &fakeIngress{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out, errb bytes.Buffer
	code := cmdPublish([]string{"-url", srv.URL, "-stream-name", "s-1", "-sequence", "40", "r"}, strings.NewReader("1\n2\n"), &out, &errb, noEnv, nil)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q", code, errb.String())
	}
	if h := f.headers; h.Get("Stream-Name") != "s-1" || h.Get("Stream-Sequence") != "40" {
		t.Fatalf("headers %v", h)
	}
	if !strings.HasSuffix(out.String(), "; next sequence 42\n") {
		t.Fatalf("stdout %q", out.String())
	}
}

// Ctrl-C stops reading the input, waits for the receipts of what was sent, and exits
// 130 with the summary, naming the sequence to go on from.
func TestPublishInterruptedStopsReadingAndReports(t *testing.T) {
	f := &fakeIngress{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	sigs := make(chan os.Signal, 1)
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() {
		done <- cmdPublish([]string{"-url", srv.URL, "-stream-name", "s", "r"}, pr, &out, &errb, noEnv, sigs)
	}()
	// An input that never ends: two lines, then nothing.
	if _, err := io.WriteString(pw, "1\n2\n"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(f.records()) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the records did not reach the bridge")
		}
	}
	sigs <- syscall.SIGINT // the input stays open: a read from a terminal does not return on Ctrl-C
	select {
	case code := <-done:
		if code != exitInterrupted {
			t.Fatalf("exit %d, want %d; stderr %q", code, exitInterrupted, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("publish did not end after SIGINT")
	}
	if !strings.Contains(out.String(), "2 records: 2 published") || !strings.Contains(errb.String(), "-sequence 2") {
		t.Fatalf("stdout %q, stderr %q", out.String(), errb.String())
	}
	pw.Close() // the read still waiting returns, and its goroutine with it
}
