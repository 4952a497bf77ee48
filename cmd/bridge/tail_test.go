package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/recordio"
)

// fakeEgress serves GET /v1/streams/s as the bridge does: a Stream-Id, its records, then
// an open response until the client goes; POST /v1/streams/s/ack takes a JSON array.
type fakeEgress struct {
	records [][]byte
	mu      sync.Mutex
	acked   []string
	queries []string
}

func (f *fakeEgress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/streams/s":
		f.mu.Lock()
		f.queries = append(f.queries, r.URL.RawQuery)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/recordio")
		w.Header().Set("Stream-Id", "st-1")
		w.WriteHeader(http.StatusOK)
		rw := recordio.NewWriter(w)
		for _, rec := range f.records {
			_ = rw.Write(rec)
		}
		_ = rw.Flush()
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	case "/v1/streams/s/ack":
		var ids []json.RawMessage
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("Stream-Id") != "st-1" || json.Unmarshal(body, &ids) != nil {
			http.Error(w, `{"status":400,"error":"bad ack"}`, http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		for _, id := range ids {
			f.acked = append(f.acked, string(id))
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":200,"acked":1}`))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"status":404,"error":"no stream at \"` + r.URL.Path + `\""}`))
	}
}

func (f *fakeEgress) ackedSoFar() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.acked...)
}

// -n N prints N records and stops; with -ack client exactly those N are acknowledged,
// nothing the response delivered after them.
func TestTailStopsAfterNAndAcknowledgesOnlyWhatItPrinted(t *testing.T) {
	f := &fakeEgress{records: [][]byte{[]byte(`{"n":0}`), []byte("{\n\"n\": 1}"), []byte(`{"n":2}`)}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out, errb bytes.Buffer
	code := cmdTail([]string{"-url", srv.URL, "s", "-n", "2", "-ack", "client", "-position", "earliest"}, &out, &errb, noEnv, nil)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if want := "{\"n\":0}\n{\"n\":1}\n"; out.String() != want {
		t.Fatalf("stdout %q, want %q", out.String(), want)
	}
	if got := f.ackedSoFar(); strings.Join(got, ",") != "0,1" {
		t.Fatalf("acknowledged %q, want positions 0 and 1", got)
	}
	if f.queries[0] != "ack=client&position=earliest" {
		t.Fatalf("query %q", f.queries[0])
	}
}

// Ctrl-C ends tail cleanly: exit 0, what was printed flushed and acknowledged.
func TestTailEndsCleanlyOnInterrupt(t *testing.T) {
	f := &fakeEgress{records: [][]byte{[]byte(`{"n":0}`), []byte(`{"n":1}`)}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	sigs := make(chan os.Signal, 1)
	pr, pw := io.Pipe()
	lines := make(chan string, 10)
	go func() {
		defer close(lines)
		buf := make([]byte, 1024)
		for {
			n, err := pr.Read(buf)
			if n > 0 {
				lines <- string(buf[:n])
			}
			if err != nil {
				return
			}
		}
	}()
	var errb bytes.Buffer
	done := make(chan int)
	go func() { done <- cmdTail([]string{"-url", srv.URL, "-ack", "client", "s"}, pw, &errb, noEnv, sigs) }()
	var got string
	for deadline := time.After(10 * time.Second); got != "{\"n\":0}\n{\"n\":1}\n"; {
		select {
		case l := <-lines:
			got += l
		case <-deadline:
			t.Fatalf("printed %q so far", got)
		}
	}
	sigs <- syscall.SIGINT
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("exit %d, stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail did not end on SIGINT")
	}
	pw.Close()
	if acked := f.ackedSoFar(); strings.Join(acked, ",") != "0,1" {
		t.Fatalf("acknowledged %q", acked)
	}
}

// A stream the bridge refuses is exit 1 with the bridge's answer; -o envelope asks for
// the envelope.
func TestTailOfAMissingStreamFails(t *testing.T) {
	srv := httptest.NewServer(&fakeEgress{})
	defer srv.Close()
	var out, errb bytes.Buffer
	code := cmdTail([]string{"-url", srv.URL, "-o", "envelope", "nope"}, &out, &errb, noEnv, nil)
	if code != exitRefused || !strings.Contains(errb.String(), `404`) || !strings.Contains(errb.String(), `no stream at "/v1/streams/nope"`) {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}

// A record JSON lines cannot hold ends tail with exit 1 naming its position; it is not
// acknowledged (it was not printed), and what came before it was printed and is.
func TestTailStopsAtARecordItCannotPrint(t *testing.T) {
	f := &fakeEgress{records: [][]byte{[]byte(`{"n":0}`), {0xff, 0x00}, []byte(`{"n":2}`)}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var out, errb bytes.Buffer
	code := cmdTail([]string{"-url", srv.URL, "-ack", "client", "-o", "envelope", "s"}, &out, &errb, noEnv, nil)
	if code != exitRefused || !strings.Contains(errb.String(), "record at position 1 of stream st-1: neither JSON nor UTF-8 text") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if out.String() != "{\"n\":0}\n" || strings.Join(f.ackedSoFar(), ",") != "0" {
		t.Fatalf("stdout %q, acknowledged %q", out.String(), f.ackedSoFar())
	}
	if f.queries[0] != "ack=client&envelope=json" {
		t.Fatalf("query %q", f.queries[0])
	}
}

// Printing does not wait for acknowledgements: while the first /ack is unanswered, the
// records after it are printed, and what was printed meanwhile is acknowledged in the
// next one. (Waiting for each, a 100 000-record tail took 22 s instead of 1.3 s.)
func TestTailPrintsOnWhileAnAcknowledgementIsOnItsWay(t *testing.T) {
	firstAck, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	var acks []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/streams/s/ack" {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			acks = append(acks, string(body))
			n := len(acks)
			mu.Unlock()
			if n == 1 {
				close(firstAck)
				<-release
			}
			_, _ = w.Write([]byte(`{"status":200,"acked":1}`))
			return
		}
		w.Header().Set("Stream-Id", "st-1")
		rw := recordio.NewWriter(w)
		_ = rw.Write([]byte(`{"n":0}`))
		_ = rw.Flush()
		http.NewResponseController(w).Flush()
		select {
		case <-firstAck: // record 0 was printed and its acknowledgement is on its way
		case <-r.Context().Done():
			return
		}
		for i := 1; i < 4; i++ {
			_ = rw.Write(fmt.Appendf(nil, `{"n":%d}`, i))
		}
		_ = rw.Flush()
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	defer close(release)
	out := &logbuf.Buffer{}
	done := make(chan int)
	go func() {
		done <- cmdTail([]string{"-url", srv.URL, "-ack", "client", "-n", "4", "s"}, out, io.Discard, noEnv, nil)
	}()
	deadline := time.After(10 * time.Second)
	for out.String() != "{\"n\":0}\n{\"n\":1}\n{\"n\":2}\n{\"n\":3}\n" {
		select {
		case <-deadline:
			t.Fatalf("printed %q while the first acknowledgement was unanswered", out.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	release <- struct{}{}
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d", code)
	}
	mu.Lock()
	defer mu.Unlock()
	var all []string
	for _, a := range acks {
		all = append(all, strings.Trim(a, "[]"))
	}
	if acks[0] != "[0]" || strings.Join(all, ",") != "0,1,2,3" {
		t.Fatalf("acknowledgements %q, want [0] first, then 1 to 3, each once, in order", acks)
	}
}
