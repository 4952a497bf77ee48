package pulsarpool

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

const takeoverTopic = "persistent://public/default/takeover"

func namedMsg(seq int64) ingress.Message {
	return ingress.Message{Topic: takeoverTopic, Producer: "recordio-bridge/r/s", Sequence: seq, Payload: []byte{byte(seq)}}
}

// A request on another bridge process (another pool and client) takes a named stream
// over while this process still holds its producer with a record in flight: the new
// request publishes at once, this process's record in flight fails with ErrTakenOver
// (its client moved on), so does the next record of its request, unsent, and the topic
// holds every sequence once.
func TestNamedStreamTakenOverOnAnotherProcessFencesTheOldProducerAtOnce(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	o := Options{CreateTimeout: 2 * time.Second, IdleTimeout: time.Hour, NamedAccessMode: pulsar.AccessExclusiveWithFencing}
	a, bb := New(newClient(t, b.URL()), o), New(newClient(t, b.URL()), o)
	defer a.Close()
	defer bb.Close()
	releaseA, err := a.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseA()
	for seq := range int64(2) {
		if _, err := publishMsg(t, a, namedMsg(seq)); err != nil {
			t.Fatal(err)
		}
	}
	b.HoldReceipts(true)
	inflight := make(chan error, 1)
	m := namedMsg(2)
	a.PublishAsync(context.Background(), &m, func(_ string, err error) { inflight <- err })
	deadline := time.Now().Add(wait)
	for len(b.Messages(takeoverTopic)) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("the record in flight was not stored")
		}
		time.Sleep(5 * time.Millisecond)
	}

	releaseB, err := bb.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	resent := make(chan error, 1)
	m2 := namedMsg(2)
	bb.PublishAsync(context.Background(), &m2, func(_ string, err error) { resent <- err })
	select {
	case err := <-inflight:
		if !errors.Is(err, ingress.ErrTakenOver) {
			t.Fatalf("the old process's record in flight: %v, want ErrTakenOver", err)
		}
	case <-time.After(wait):
		t.Fatal("the old process's record in flight did not fail")
	}
	b.HoldReceipts(false)
	select {
	case err := <-resent:
		if !errors.Is(err, ingress.ErrDuplicate) {
			t.Fatalf("the resent record on the other process: %v, want ErrDuplicate", err)
		}
	case <-time.After(wait):
		t.Fatal("the resent record on the other process got no answer")
	}
	if _, err := publishMsg(t, bb, namedMsg(3)); err != nil {
		t.Fatalf("the next record on the other process: %v", err)
	}
	if _, err := publishMsg(t, a, namedMsg(3)); !errors.Is(err, ingress.ErrTakenOver) {
		t.Fatalf("the old request's next record: %v, want ErrTakenOver, unsent", err)
	}
	var seqs []uint64
	for _, m := range b.Messages(takeoverTopic) {
		seqs = append(seqs, m.SequenceID)
	}
	if len(seqs) != 4 || seqs[0] != 0 || seqs[1] != 1 || seqs[2] != 2 || seqs[3] != 3 {
		t.Fatalf("stored sequences %v, want [0 1 2 3]", seqs)
	}
}

// With shared producers a named stream's producer is closed as soon as its request
// ends, so a request on another bridge process gets the producer name at once instead
// of ProducerBusy until the idle timeout.
func TestNamedStreamProducersCloseWhenTheirRequestEnds(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	closed := make(chan struct{}, 1)
	o := Options{CreateTimeout: 2 * time.Second, IdleTimeout: time.Hour}
	bb := New(newClient(t, b.URL()), o)
	o.hook = func(event, _ string) {
		if event == "closed" {
			closed <- struct{}{}
		}
	}
	a := New(newClient(t, b.URL()), o)
	defer a.Close()
	defer bb.Close()
	release, err := a.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishMsg(t, a, namedMsg(0)); err != nil {
		t.Fatal(err)
	}
	release()
	select {
	case <-closed:
	case <-time.After(wait):
		t.Fatal("the ended stream's producer is still open")
	}
	releaseB, err := bb.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	if _, err := publishMsg(t, bb, namedMsg(1)); err != nil {
		t.Fatalf("the stream's next request on another process: %v", err)
	}
}

// Partitions added while a named stream's record is unreceipted: its resend may go to
// another partition than its first send would have, one where the stream's later records
// of another key are already stored. It must be stored there (at worst twice, never
// dropped as a duplicate of what that partition holds of the stream).
func TestNamedStreamRecordResentAfterPartitionsWereAddedIsNotLost(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	const topic = "persistent://public/default/growing"
	b.SetPartitions(topic, 2)
	// Keys a and k: apart under 2 partitions, a under 3 where k was under 2, so the
	// resent record of a meets k's later record there.
	var a, k string
	for i := 0; a == "" && i < 1000; i++ {
		for j := 0; j < 1000; j++ {
			ka, kk := "a"+strconv.Itoa(i), "k"+strconv.Itoa(j)
			h := pulsar.JavaStringHash
			if h.Partition(ka, 2) != h.Partition(kk, 2) && h.Partition(ka, 3) == h.Partition(kk, 2) {
				a, k = ka, kk
				break
			}
		}
	}
	if a == "" {
		t.Fatal("no pair of keys")
	}
	ps := New(newClient(t, b.URL()), Options{CreateTimeout: 2 * time.Second, IdleTimeout: time.Hour})
	defer ps.Close()
	msg := func(seq int64, key string) ingress.Message {
		return ingress.Message{Topic: topic, Producer: "recordio-bridge/r/s", Sequence: seq, Key: key, Payload: []byte(key)}
	}
	release, err := ps.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	// Record 0 (key a) is lost in flight; record 1 (key k) is stored: the request ends there.
	if _, err := publishMsg(t, ps, msg(1, k)); err != nil {
		t.Fatal(err)
	}
	release()
	b.SetPartitions(topic, 3)
	release, err = ps.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := publishMsg(t, ps, msg(0, a)); err != nil {
		t.Fatalf("record 0 resent after the topic grew: %v, want stored (a duplicate answer would be a loss)", err)
	}
	var stored []string
	for i := range 3 {
		for _, m := range b.Messages(topic + "-partition-" + strconv.Itoa(i)) {
			stored = append(stored, m.Key)
		}
	}
	found := false
	for _, key := range stored {
		found = found || key == a
	}
	if !found {
		t.Fatalf("stored keys %v: record 0 (key %s) is missing", stored, a)
	}
}

// A named stream's request that ends while its producer is still being created (its
// client gave up waiting): the producer, created after the release, is closed at once
// too, so a request of the stream on another bridge process is not refused the producer
// name (ProducerBusy) until the idle timeout.
func TestNamedStreamProducerCreatedAfterItsRequestEndedIsClosed(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	entered, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	var first sync.Once
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandProducer {
			first.Do(func() {
				close(entered)
				<-gate
			})
		}
		return pulsartest.Pass()
	})
	a, ev := newPool(t, newClient(t, b.URL()), Options{})
	bb, _ := newPool(t, newClient(t, b.URL()), Options{})
	release, err := a.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	m := namedMsg(0)
	go a.PublishAsync(ctx, &m, func(_ string, err error) { done <- err }) // waits for the producer
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the producer's registration did not reach the broker")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("the abandoned record got no answer")
	}
	release()
	open()
	ev.await(t, "closed", 1)
	releaseB, err := bb.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	if _, err := publishMsg(t, bb, namedMsg(0)); err != nil {
		t.Fatalf("the stream's next request on another process: %v", err)
	}
}

// With shared producers a request on another bridge process that was refused the
// stream's producer name (ProducerBusy: the first process's request was still open)
// does not leave that refusal cached for the stream's next request there: once the
// first request has ended, the next one registers the name at once, not after the
// failed creation's backoff.
func TestNamedStreamRefusedWhileBusyOnAnotherProcessIsAcceptedOnceThatOneEnds(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.UniqueProducerNames(true)
	ev := newEvents()
	o := Options{CreateTimeout: 2 * time.Second, IdleTimeout: time.Hour, CreateRetryMin: time.Hour}
	bb := New(newClient(t, b.URL()), o)
	o.hook = ev.hook
	a := New(newClient(t, b.URL()), o)
	defer a.Close()
	defer bb.Close()
	releaseA, err := a.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishMsg(t, a, namedMsg(0)); err != nil {
		t.Fatal(err)
	}
	releaseB, err := bb.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publishMsg(t, bb, namedMsg(1)); !errors.Is(err, ingress.ErrUnavailable) {
		t.Fatalf("the stream on another process while its request here is open: %v, want ErrUnavailable (ProducerBusy)", err)
	}
	releaseB()
	releaseA()
	ev.await(t, "closed", 1)
	releaseB, err = bb.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	if _, err := publishMsg(t, bb, namedMsg(1)); err != nil {
		t.Fatalf("the stream's next request on the other process, once the first ended: %v", err)
	}
}

// A named stream's producer creation that fails after its request has ended (the
// client went away while it was under way) is not kept for the stream's next request
// either: that request creates the producer afresh instead of getting the old failure
// for the creation backoff.
func TestNamedStreamCreationFailingAfterItsRequestEndedIsNotKept(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	var mu sync.Mutex
	ignoring := true
	seen := make(chan struct{}, 1)
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		if cmd.Cmd.GetType() != pulsartest.CommandProducer {
			return pulsartest.Pass()
		}
		mu.Lock()
		defer mu.Unlock()
		if !ignoring {
			return pulsartest.Pass()
		}
		select {
		case seen <- struct{}{}:
		default:
		}
		return pulsartest.Ignore()
	})
	ps := New(newClient(t, b.URL()), Options{CreateTimeout: 300 * time.Millisecond, IdleTimeout: time.Hour, CreateRetryMin: time.Hour})
	defer ps.Close()
	release, err := ps.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	m := namedMsg(0)
	go ps.PublishAsync(ctx, &m, func(_ string, err error) { gone <- err }) // it waits for the producer
	select {
	case <-seen:
	case <-time.After(wait):
		t.Fatal("the producer was never registered")
	}
	ps.mu.Lock()
	e := ps.m[entryKey(takeoverTopic, "recordio-bridge/r/s", nil)]
	ps.mu.Unlock()
	if e == nil {
		t.Fatal("no creation under way")
	}
	cancel() // the client went away
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the record of the request whose client went away: %v", err)
	}
	release()
	select {
	case <-e.ready:
	case <-time.After(wait):
		t.Fatal("the creation did not end")
	}
	if e.err == nil {
		t.Fatal("the creation did not fail")
	}
	mu.Lock()
	ignoring = false
	mu.Unlock()
	release, err = ps.ClaimStream("recordio-bridge/r/s")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if _, err := publishMsg(t, ps, namedMsg(0)); err != nil {
		t.Fatalf("the stream's next request: %v", err)
	}
}
