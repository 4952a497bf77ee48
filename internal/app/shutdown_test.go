package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/internal/tcptest"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/recordio"
)

// blackHole accepts connections, reads and discards what they send and never answers:
// an OTLP collector that hangs. stop closes it and its connections.
func blackHole(t *testing.T) (addr string, stop func()) {
	t.Helper()
	srv := tcptest.Serve(t, func(_ *tcptest.Server, c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	return srv.Addr(), srv.Close
}

// Shutdown must return at its deadline whatever hangs: a broker that stopped reading
// (the producers cannot flush), an OTLP collector that accepts and never answers (the
// trace export cannot finish), an ingress client that stopped reading its receipts and
// an egress stream whose consumer cannot be closed on the broker.
// The bound is the deadline plus a generous slack for the closes after it (a
// correctness bound, not a speed figure); goleak (TestMain) checks that every goroutine
// still ends.
func TestShutdownReturnsAtItsDeadlineWhateverHangs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // every goroutine of the bridge ends
	hole, stopHole := blackHole(t)
	defer stopHole()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+hole)
	t.Setenv("OTEL_TRACES_SAMPLER", "always_on")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50") // an export is under way when Shutdown starts
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	writeConfig(t, path, b.URL(), "ingress:\n  publishTimeout: 60s\nstreams:\n  - name: s\n    topics: [t]")
	a, err := New(Options{ConfigPath: path, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if !a.tracing.Enabled {
		t.Fatal("tracing is off; the test needs the hung collector")
	}
	ran := make(chan error, 1)
	go func() { ran <- a.Run(context.Background()) }()

	// An ingress client that writes records and never reads a receipt, through a small
	// receive buffer so the bridge's receipt writes block early.
	c, err := net.Dial("tcp", a.DataAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	if _, err := fmt.Fprintf(c, "POST /v1/publish/r HTTP/1.1\r\nHost: x\r\nContent-Type: application/recordio\r\n"+
		"Message-Content-Type: application/json\r\nAccept: application/recordio\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	rec := recordio.AppendRecord(nil, []byte(`{"payload":"`+strings.Repeat("x", 200)+`"}`))
	chunk := []byte(fmt.Sprintf("%x\r\n%s\r\n", len(rec), rec))
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for {
			if _, err := c.Write(chunk); err != nil {
				return // the bridge closed the connection
			}
		}
	}()
	// Records flow (the broker stores them, the receipts go unread) ...
	deadline := time.Now().Add(30 * time.Second)
	for len(b.Messages("persistent://public/default/t")) < 100 {
		if time.Now().After(deadline) {
			t.Fatal("no record reached the broker in 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// An egress stream reading the topic (its consumer's close cannot be answered either).
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	ereq, _ := http.NewRequest(http.MethodGet, "http://"+a.DataAddr().String()+"/v1/streams/s", nil)
	ereq.Header.Set("Accept", "application/recordio")
	eresp, err := client.Do(ereq)
	if err != nil {
		t.Fatal(err)
	}
	if eresp.StatusCode != http.StatusOK {
		t.Fatalf("egress stream: %s", eresp.Status)
	}
	egressDone := make(chan struct{})
	go func() { defer close(egressDone); _, _ = io.Copy(io.Discard, eresp.Body) }()
	defer func() { eresp.Body.Close(); <-egressDone }()
	// ... then the broker freezes with records in flight.
	b.StopReading()

	const drain = 2 * time.Second
	const slack = 1500 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- a.Shutdown(ctx) }()
	var serr error
	select {
	case serr = <-shut:
	case <-time.After(150 * time.Second):
		t.Fatal("Shutdown did not return in 150 s")
	}
	took := time.Since(start)
	t.Logf("Shutdown with a %s deadline returned after %s: %v", drain, took.Round(time.Millisecond), serr)
	if !errors.Is(serr, context.DeadlineExceeded) {
		t.Errorf("Shutdown returned %v, want the deadline's error (nothing could settle)", serr)
	}
	if took > drain+slack {
		t.Errorf("Shutdown returned %s after it started, past its %s deadline + %s", took.Round(time.Millisecond), drain, slack)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	c.Close()
	<-writerDone
}
