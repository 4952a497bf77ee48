package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestIngressReceiptsArriveWhileTheBodyIsOpen proves full duplex over HTTP/1.1 and h2c:
// the client sends one record, waits for its receipt, and only then sends the next.
func TestIngressReceiptsArriveWhileTheBodyIsOpen(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "duplex")
	p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nroutes:\n  - name: r\n    default: {topic: %s}\n", b.URL, topic))
	for _, tc := range []struct {
		name   string
		client *http.Client
		proto  int
	}{{"HTTP/1.1", h1Client, 1}, {"h2c", h2cClient, 2}} {
		st := openStream(t, tc.client, p.DataURL+"/v1/publish/r", nil)
		if st.resp.ProtoMajor != tc.proto {
			t.Fatalf("%s: response over %s", tc.name, st.resp.Proto)
		}
		var worst time.Duration
		for i := range 50 {
			start := time.Now()
			if err := st.send(rec(i)); err != nil {
				t.Fatal(err)
			}
			select {
			case r := <-st.receipts:
				if r.Seq != int64(i) || r.Status != 200 {
					t.Fatalf("%s: receipt %+v", tc.name, r)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: no receipt for record %d while the body stays open", tc.name, i)
			}
			worst = max(worst, time.Since(start))
		}
		_, sum, err := st.finish(10 * time.Second)
		if err != nil || sum.Status != 200 || sum.Published != 50 {
			t.Fatalf("%s: %+v %v", tc.name, sum, err)
		}
		t.Logf("%s (%s): 50 records one at a time, each receipt before the next record; slowest round trip %s", tc.name, st.resp.Proto, worst.Round(time.Microsecond))
	}
}

// TestIngressStreamsLargeRecordsAsChunks publishes a 40 MiB record (the broker's limit
// is 5 MiB) between small ones: it goes out as chunks read from the request as they come,
// and the official consumer reassembles it byte for byte. The bridge's resident memory
// stays below the record's size: it was never held whole.
func TestIngressStreamsLargeRecordsAsChunks(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "large")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  maxRecordBytes: 64MiB
  bufferRecordBytes: 256KiB
routes:
  - name: r
    default: {topic: %s}
`, b.URL, topic))
	big := make([]byte, 40<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range big {
		big[i] = byte(rng.IntN(256))
	}
	sum := sha256.Sum256(big)
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", nil)
	if err := st.send(rec(0)); err != nil {
		t.Fatal(err)
	}
	// The big record goes in 64 KiB writes, as a scheduler's socket would deliver it.
	if _, err := st.pw.Write(recordio.AppendHeader(nil, uint64(len(big)))); err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(big); off += 64 << 10 {
		if _, err := st.pw.Write(big[off:min(off+64<<10, len(big))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.send(rec(2)); err != nil {
		t.Fatal(err)
	}
	rs, s, err := st.finish(2 * time.Minute)
	if err != nil || s.Status != 200 || s.Published != 3 || len(rs) != 3 || rs[1].Status != 200 {
		t.Fatalf("receipts %+v summary %+v err %v", rs, s, err)
	}
	rss := processRSS(t, p.cmd.Process.Pid)
	c, err := official.NewClient(official.ClientOptions{URL: b.URL, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cons, err := c.Subscribe(official.ConsumerOptions{Topic: topic, SubscriptionName: "check", SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 3 {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch i {
		case 1:
			if got := sha256.Sum256(msg.Payload()); got != sum || len(msg.Payload()) != len(big) {
				t.Fatalf("the large record arrived as %d bytes with another digest", len(msg.Payload()))
			}
		default:
			if !bytes.Equal(msg.Payload(), rec(i)) {
				t.Fatalf("message %d: %q", i, msg.Payload())
			}
		}
		_ = cons.Ack(msg)
	}
	t.Logf("40 MiB record published as chunks (receipt %s, the last chunk's id) and reassembled by the official consumer; bridge RSS afterwards %d MiB",
		rs[1].MessageID, rss>>20)
	if rss >= int64(len(big)) {
		t.Fatalf("bridge RSS %d MiB after streaming a %d MiB record through a 256 KiB buffer: was it held whole?", rss>>20, len(big)>>20)
	}
}

// processRSS reads a process's resident set size from /proc.
func processRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
