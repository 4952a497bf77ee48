package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// SIGTERM must not wait for a client that stopped reading its receipts: before, the
// bridge's receipt writer blocked for ever on the full socket and the process ran until
// SIGKILL. The client here writes its body and never reads a byte of the response.
func TestSIGTERMDoesNotWaitForAClientThatStoppedReading(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "stuck")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  drainTimeout: 2s
routes:
  - name: s
    default: {topic: %s}
`, b.URL, topic))
	conn, err := net.Dial("tcp", strings.TrimPrefix(p.DataURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4096) // the receipts pile up in the bridge's socket
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "POST /v1/publish/s HTTP/1.1\r\nHost: bridge\r\nContent-Type: application/recordio\r\n"+
		"Message-Content-Type: application/json\r\nAccept: application/recordio\r\nTransfer-Encoding: chunked\r\n\r\n")
	var chunk []byte
	for i := range 500 {
		rec := fmt.Sprintf(`{"n":%d}`, i)
		chunk = fmt.Appendf(chunk, "%d\n%s", len(rec), rec)
	}
	// Write until the bridge stops reading: its receipt writer is blocked, so its queue
	// of records awaiting receipts is full. A write that has not gone through for 3 s is
	// that state (the broker persists these records in milliseconds).
	for sent := 0; ; sent++ {
		_ = conn.SetWriteDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk)
		if err := w.Flush(); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("writing the body: %v", err)
			}
			t.Logf("the bridge stopped reading after about %d records", sent*500)
			break
		}
		if sent > 20000 {
			t.Fatal("10 000 000 records written without the bridge stopping: the receipts are not piling up")
		}
	}
	err, took := p.terminate(60 * time.Second)
	if err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, tail(p.logs.String(), 20))
	}
	t.Logf("exit 0 %s after SIGTERM (drain timeout 2s) with a client that reads nothing", took.Round(time.Millisecond))
}

// A trace collector that accepts connections and never answers must not hold SIGTERM
// past the drain: every shutdown step shares the drain's deadline, the trace flush
// last. Before, the traces had 5 s of their own after the drain (and the producers 2 s,
// the metrics 1 s). The bound is the drain plus a generous slack for the process to
// exit (a correctness bound, not a speed figure).
func TestSIGTERMWithAHungTraceCollectorExitsWithinTheDrain(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "hungotlp")
	hole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hole.Close()
	var held []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := hole.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // read nothing, answer nothing
		}
	}()
	defer func() {
		hole.Close()
		<-accepted
		for _, c := range held {
			c.Close()
		}
	}()
	const drain = 2 * time.Second
	const slack = 1500 * time.Millisecond
	p := startBridgeEnv(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  drainTimeout: %s
routes:
  - name: s
    default: {topic: %s}
`, b.URL, drain, topic), []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + hole.Addr().String(),
		"OTEL_TRACES_SAMPLER=always_on", "OTEL_BSP_SCHEDULE_DELAY=50"})
	// Records with spans, so there is something to export when SIGTERM comes.
	for i := range 20 {
		code, _, body := postOne(t, p.DataURL+"/v1/publish/s", map[string]string{"Content-Type": "application/json"},
			fmt.Appendf(nil, `{"n":%d}`, i))
		if code != 200 {
			t.Fatalf("record %d: %d %s", i, code, body)
		}
	}
	err, took := p.terminate(60 * time.Second)
	if err != nil {
		t.Fatalf("after SIGTERM: %v\n%s", err, tail(p.logs.String(), 20))
	}
	t.Logf("exit 0 %s after SIGTERM (drain timeout %s) with a hung trace collector", took.Round(time.Millisecond), drain)
	if took > drain+slack {
		t.Fatalf("exit %s after SIGTERM, past the %s drain + %s\n%s", took.Round(time.Millisecond), drain, slack, tail(p.logs.String(), 20))
	}
}
