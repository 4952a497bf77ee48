package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// A client streams a named stream into one bridge process, loses sight of it (its
// request there stays open, as behind a load balancer that moved the client) and
// resumes on a second process from the resumeSequence its receipts give. With
// pulsar.namedStreamAccessMode exclusiveWithFencing the second process takes the stream
// over at once (with shared producers it is refused, 503 ProducerBusy, for as long as the
// first request holds the producer name); the first process's producer is fenced: the
// record its client still sends there is answered 409 without being published, its
// request ends 409, and it does not reconnect. The official client then finds every
// record on the keyless 3-partition topic once, in order, on the stream name's partition.
func TestNamedStreamTakenOverOnAnotherBridgeProcess(t *testing.T) {
	b := broker.Get(t)
	topic, a, bp := twoBridgesOnOneTopic(t, b, "takeover", 3, "namedStreamAccessMode: exclusiveWithFencing")

	// On A: 0..99 sent, the client reads the receipts of 0..59 and then loses the
	// connection from its side (the request stays open on A).
	onA := openStream(t, h1Client, a.DataURL+"/v1/publish/r", streamAt(0))
	if err := onA.send(records(0, 99)...); err != nil {
		t.Fatal(err)
	}
	onA.wantReceipts(t, "A", 0, 60)

	// On B: resumed from 60, through 199.
	start := time.Now()
	onB := openStream(t, h1Client, bp.DataURL+"/v1/publish/r", streamAt(60))
	if err := onB.send(records(60, 199)...); err != nil {
		t.Fatal(err)
	}
	var firstReceipt time.Duration
	var rsB []receipt
	for len(rsB) < 140 {
		select {
		case r, ok := <-onB.receipts:
			if !ok {
				t.Fatalf("B's response ended after %d receipts: %v", len(rsB), <-onB.errc)
			}
			if len(rsB) == 0 {
				firstReceipt = time.Since(start)
			}
			rsB = append(rsB, r)
		case <-time.After(time.Minute):
			t.Fatalf("B answered %d of 140 records within a minute", len(rsB))
		}
	}
	dups := 0
	for i, r := range rsB {
		if r.Status != 200 || r.Sequence == nil || *r.Sequence != int64(60+i) {
			t.Fatalf("B's receipt %d: %+v (the takeover must not wait for A's producer)", i, r)
		}
		if r.Duplicate {
			dups++
		}
	}
	_, sumB, err := onB.finish(time.Minute)
	if err != nil || sumB.Status != 200 {
		t.Fatalf("B's summary %+v: %v", sumB, err)
	}

	// A's client, still connected, sends one more record: A's producer is fenced.
	if err := onA.send(rec(100)); err != nil {
		t.Fatal(err)
	}
	rsA, sumA, err := onA.finish(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var refused []int64
	for _, r := range rsA {
		if r.Status == 409 {
			refused = append(refused, *r.Sequence)
			if !strings.Contains(r.Error, "taken over") {
				t.Fatalf("A's 409 does not say the stream was taken over: %+v", r)
			}
		} else if r.Status != 200 {
			t.Fatalf("A's receipt %+v: want 200 (persisted before the takeover) or 409", r)
		}
	}
	if len(refused) == 0 || refused[len(refused)-1] != 100 || sumA.Status != 409 {
		t.Fatalf("A's receipts after the takeover %+v, summary %+v: want the last ones 409 and the request ending 409", rsA, sumA)
	}
	// Each of A's partition producers stops once, for good: no registration attempts
	// follow (a loop would log a reconnect every backoff).
	fencedOnce := func() int {
		n := 0
		for _, line := range strings.Split(a.logs.String(), "\n") {
			if strings.Contains(line, `"msg":"producer failed"`) && strings.Contains(line, "producer fenced") {
				n++
			}
		}
		return n
	}
	attempts := func() int {
		l := a.logs.String()
		return strings.Count(l, `"msg":"producer reconnect failed"`) + strings.Count(l, `"msg":"producer disconnected; reconnecting"`) +
			strings.Count(l, `"msg":"producer reconnected"`)
	}
	for deadline := time.Now().Add(10 * time.Second); fencedOnce() == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond) // the process's log reaches the test through a pipe
	}
	fenced, tried := fencedOnce(), attempts()
	time.Sleep(2 * time.Second)
	if fenced == 0 || fenced > 3 || fencedOnce() != fenced || attempts() != tried {
		t.Fatalf("A's partition producers: %d then %d fenced, %d then %d registration attempts; want 1 to 3 fenced once each, no attempt after:\n%s",
			fenced, fencedOnce(), tried, attempts(), tail(a.logs.String(), 40))
	}

	msgs := readAll(t, newOfficialClient(t, b), topic, 3*time.Second)
	part := map[int32]bool{}
	for i, m := range msgs {
		if want := string(rec(i)); string(m.Payload()) != want {
			t.Fatalf("message %d is %s, want %s (%d stored)", i, m.Payload(), want, len(msgs))
		}
		part[m.ID().PartitionIdx()] = true
	}
	if len(msgs) != 200 || len(part) != 1 {
		t.Fatalf("%d messages stored on partitions %v; want 200, each once, on one partition", len(msgs), part)
	}
	t.Logf("A reported %d partition producers fenced", fenced)
	t.Logf("takeover: B's first receipt %s after its request began; %d of B's 140 records were duplicates of A's; A refused %d records (409) after the takeover; 200 stored, each once, in order",
		firstReceipt.Round(time.Millisecond), dups, len(refused))
}

// With shared producers (the default) a client that resumes its named stream on a second
// process while its request on the first is still open is refused there (503,
// ProducerBusy) for as long as that request holds the producer name, however often it
// retries; as soon as the first request ends, the second process accepts the stream's
// next request: its refusals are not kept for the retry backoff of a failed producer
// creation (after three refusals in a row, 4 s).
func TestNamedStreamOnAnotherSharedProcessIsAcceptedOnceTheFirstRequestEnds(t *testing.T) {
	b := broker.Get(t)
	topic, a, bp := twoBridgesOnOneTopic(t, b, "busy", 3, "")
	onA := openStream(t, h1Client, a.DataURL+"/v1/publish/r", streamAt(0))
	if err := onA.send(rec(0)); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-onA.receipts:
		if r.Status != 200 {
			t.Fatalf("A's receipt: %+v", r)
		}
	case <-time.After(time.Minute):
		t.Fatal("A's receipt did not come")
	}
	onB := func() receipt {
		t.Helper()
		s := openStream(t, h1Client, bp.DataURL+"/v1/publish/r", streamAt(1))
		if err := s.send(rec(1)); err != nil {
			t.Fatal(err)
		}
		rs, _, err := s.finish(time.Minute)
		if err != nil || len(rs) != 1 {
			t.Fatalf("B's receipts %+v: %v", rs, err)
		}
		return rs[0]
	}
	// B is refused while A's request is open, at least three times in a row over 3.5 s
	// (each a creation attempt, past the backoff of the one before: 1 s, then 2 s).
	refusals := 0
	for start := time.Now(); time.Since(start) < 3500*time.Millisecond || refusals < 3; {
		r := onB()
		if r.Status != 503 || !strings.Contains(r.Error, "ProducerBusy") {
			t.Fatalf("B's receipt while A's request is open: %+v, want 503 ProducerBusy", r)
		}
		refusals++
		time.Sleep(100 * time.Millisecond)
	}
	if _, sum, err := onA.finish(time.Minute); err != nil || sum.Status != 200 {
		t.Fatalf("A's summary %+v: %v", sum, err)
	}
	// A closes the stream's producers as its request ends; B's next request may still
	// meet them for moments (503 ProducerBusy), and is accepted once they are closed.
	var r receipt
	start := time.Now()
	for {
		r = onB()
		if r.Status == 200 || time.Since(start) > 1500*time.Millisecond {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.Status != 200 {
		t.Fatalf("B's receipt %s after A's request ended: %+v, want 200", time.Since(start).Round(time.Millisecond), r)
	}
	t.Logf("B refused %d times while A's request was open, accepted %s after it ended", refusals, time.Since(start).Round(time.Millisecond))
	msgs := readAll(t, newOfficialClient(t, b), topic, 3*time.Second)
	if len(msgs) != 2 || string(msgs[0].Payload()) != string(rec(0)) || string(msgs[1].Payload()) != string(rec(1)) {
		t.Fatalf("%d messages stored, want records 0 and 1 once each", len(msgs))
	}
}
