package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// A named stream is open on one bridge process (shared producers, the default) on a
// 3-partition topic, and the topic grows to 5 partitions. The client resumes the stream
// on a second process, whose producers are named after the new count (…@5), so the
// broker would let both processes write the stream. The stream's lease (its name without
// the count, held on partition 0 by the first request) refuses the second process: 503,
// naming the broker's ProducerBusy, nothing written. Once the first request has ended,
// the second process is accepted, and everything receipted is stored once.
func TestNamedStreamOnAnotherBridgeProcessIsRefusedWhilePartitionsAreAdded(t *testing.T) {
	b := broker.Get(t)
	topic, a, bp := twoBridgesOnOneTopic(t, b, "lease", 3, "")

	// On A: 0..49 receipted, the request stays open.
	onA := openStream(t, h1Client, a.DataURL+"/v1/publish/r", streamAt(0))
	if err := onA.send(records(0, 49)...); err != nil {
		t.Fatal(err)
	}
	onA.wantReceipts(t, "A", 0, 50)
	b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/partitions", []byte("5"))

	// On B, while A's request is open: refused.
	onB := openStream(t, h1Client, bp.DataURL+"/v1/publish/r", streamAt(50))
	if err := onB.send(records(50, 59)...); err != nil {
		t.Fatal(err)
	}
	rsB, sumB, err := onB.finish(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rsB) == 0 || sumB.Status != 503 || sumB.Published != 0 {
		t.Fatalf("B's request while A holds the stream: %d receipts, summary %+v; want 503, nothing published", len(rsB), sumB)
	}
	for _, r := range rsB {
		if r.Status != 503 {
			t.Fatalf("B's receipt %+v; want 503", r)
		}
	}
	if !strings.Contains(rsB[0].Error, "already connected") {
		t.Fatalf("B's first refusal %q does not name the broker's ProducerBusy", rsB[0].Error)
	}

	// A goes on (its client never saw B's answer), then its request ends.
	if err := onA.send(records(50, 59)...); err != nil {
		t.Fatal(err)
	}
	onA.wantReceipts(t, "A", 50, 10)
	if _, sumA, err := onA.finish(time.Minute); err != nil || sumA.Status != 200 {
		t.Fatalf("A's summary %+v: %v", sumA, err)
	}

	// B again, from the first record without a receipt, as the client retries: accepted
	// once A's producers have closed (at once; a retry or two may still be refused).
	var rs []receipt
	refused := 0
	for deadline := time.Now().Add(time.Minute); ; {
		onB = openStream(t, h1Client, bp.DataURL+"/v1/publish/r", streamAt(60))
		if err := onB.send(records(60, 99)...); err != nil {
			t.Fatal(err)
		}
		rs, sumB, err = onB.finish(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if sumB.Status == 200 {
			break
		}
		if sumB.Status != 503 || time.Now().After(deadline) {
			t.Fatalf("B's request once A's ended: summary %+v, first receipt %+v", sumB, rs)
		}
		refused++
		time.Sleep(200 * time.Millisecond)
	}
	for i, r := range rs {
		if r.Status != 200 || r.Sequence == nil || *r.Sequence != int64(60+i) || r.Duplicate {
			t.Fatalf("B's receipt %d: %+v", i, r)
		}
	}
	if len(rs) != 40 {
		t.Fatalf("B answered %d records, want 40", len(rs))
	}

	msgs := readAll(t, newOfficialClient(t, b), topic, 3*time.Second)
	seen := map[string]int{}
	for _, m := range msgs {
		seen[string(m.Payload())]++
	}
	for i := range 100 {
		if seen[string(rec(i))] != 1 {
			t.Fatalf("record %d stored %d times (%d messages in all)", i, seen[string(rec(i))], len(msgs))
		}
	}
	if len(msgs) != 100 {
		t.Fatalf("%d messages stored, want 100", len(msgs))
	}
	t.Logf("B refused while A held the stream (%q); accepted after %d more refusals once A's request ended; 100 stored, each once", rsB[0].Error, refused)
}
