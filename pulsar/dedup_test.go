package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

const dedupTopic = "persistent://public/default/dedup"

// sendSeqs queues messages with the given sequence ids (payload "s-<id>") and waits for
// every callback; it returns the ids and errors in the order given.
func sendSeqs(t *testing.T, p *pulsar.Producer, ids ...int64) ([]pulsar.MessageID, []error) {
	t.Helper()
	out := make([]pulsar.MessageID, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	wg.Add(len(ids))
	for i, id := range ids {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("s-%d", id)), SequenceID: &id},
			func(mid pulsar.MessageID, err error) {
				out[i], errs[i] = mid, err
				wg.Done()
			})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("callbacks did not all run within 30 s")
	}
	return out, errs
}

func seqRange(from, to int64) []int64 {
	var s []int64
	for i := from; i <= to; i++ {
		s = append(s, i)
	}
	return s
}

// A producer that takes over a name must not batch a resent id with newer ones: the
// broker judges an entry by its first sequence id, so a batch [5..20] after 0..9 were
// persisted would be dropped whole and 10..20 lost (the fake broker, which judges by the
// highest id, would instead store 5..9 twice; either way this test fails without the rule).
func TestDeduplicationSendsIdsAtOrBelowTheLastOneAlone(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	c := client(t, b.URL())
	opts := pulsar.ProducerOptions{Topic: dedupTopic, Name: "stream-a", Deduplication: true, BatchingMaxDelay: time.Hour}
	first := producer(t, c, opts)
	if _, errs := sendSeqs(t, first, seqRange(0, 9)...); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	first.Close()

	second := producer(t, c, opts)
	b.HoldReceipts(true) // everything queues behind the first message: batches would form
	type res struct {
		ids  []pulsar.MessageID
		errs []error
	}
	ch := make(chan res, 1)
	go func() { ids, errs := sendSeqs(t, second, seqRange(5, 20)...); ch <- res{ids, errs} }()
	deadline := time.Now().Add(10 * time.Second)
	for second.Stats().PendingMessages < 16 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a condition, not standing in for it
	}
	b.HoldReceipts(false)
	r := <-ch
	for i, id := range seqRange(5, 20) {
		if r.errs[i] != nil {
			t.Fatalf("sequence %d: %v", id, r.errs[i])
		}
		if dup := r.ids[i].Duplicate(); dup != (id <= 9) {
			t.Errorf("sequence %d: duplicate = %v, want %v", id, dup, id <= 9)
		}
	}
	msgs := b.Messages(dedupTopic)
	if len(msgs) != 21 {
		t.Fatalf("broker holds %d messages, want 21 (0..20 once each)", len(msgs))
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("s-%d", i); string(m.Payload) != want || m.SequenceID != uint64(i) {
			t.Fatalf("message %d is %q with sequence id %d, want %q", i, m.Payload, m.SequenceID, want)
		}
	}
}

// After a send timeout nothing may follow the lost message to the broker: the producer
// stops, and says so.
func TestDeduplicationSendTimeoutStopsTheProducer(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: dedupTopic, Name: "stream-b", Deduplication: true,
		SendTimeout: 200 * time.Millisecond})
	b.HoldReceipts(true)
	if _, errs := sendSeqs(t, p, 0); !errors.Is(errs[0], pulsar.ErrSendTimeout) {
		t.Fatalf("err = %v, want ErrSendTimeout", errs[0])
	}
	if err := p.Err(); !errors.Is(err, pulsar.ErrSendTimeout) || !pulsar.IsRetryable(err) {
		t.Fatalf("Err() = %v, want a retryable ErrSendTimeout", err)
	}
	if _, errs := sendSeqs(t, p, 1); !errors.Is(errs[0], pulsar.ErrSendTimeout) {
		t.Fatalf("a send after the timeout: err = %v, want the producer's ErrSendTimeout", errs[0])
	}
	b.HoldReceipts(false)
	if n := len(b.Messages(dedupTopic)); n != 1 {
		t.Fatalf("broker holds %d messages, want only the one sent before the timeout", n)
	}
}

func TestSequenceIDsNeedDeduplicationAndViceVersa(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	if _, err := c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: dedupTopic, Deduplication: true}); !errors.Is(err, pulsar.ErrInvalidOptions) {
		t.Fatalf("Deduplication without a name: err = %v, want ErrInvalidOptions", err)
	}
	plain := producer(t, c, pulsar.ProducerOptions{Topic: dedupTopic})
	if _, errs := sendSeqs(t, plain, 3); !errors.Is(errs[0], pulsar.ErrSequence) {
		t.Fatalf("SequenceID without Deduplication: err = %v, want ErrSequence", errs[0])
	}
	named := producer(t, c, pulsar.ProducerOptions{Topic: dedupTopic, Name: "n", Deduplication: true})
	if _, err := named.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")}); !errors.Is(err, pulsar.ErrSequence) {
		t.Fatalf("no SequenceID with Deduplication: err = %v, want ErrSequence", err)
	}
	neg := int64(-1)
	if _, err := named.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x"), SequenceID: &neg}); !errors.Is(err, pulsar.ErrSequence) {
		t.Fatalf("negative SequenceID: err = %v, want ErrSequence", err)
	}
	if n := len(b.Messages(dedupTopic)); n != 0 {
		t.Fatalf("broker holds %d messages, want none", n)
	}
}

// A registration this side gave up on (its answer came too late) must be closed on the
// broker: otherwise the name stays busy there, and every later producer of a named
// stream gets ProducerBusy for as long as the connection lives (found by the
// exactly-once kill test after a broker restart).
func TestAbandonedRegistrationDoesNotKeepTheNameBusy(t *testing.T) {
	b := fakeBroker(t)
	b.UniqueProducerNames(true)
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.OperationTimeout = 300 * time.Millisecond })
	opts := pulsar.ProducerOptions{Topic: dedupTopic, Name: "named", Deduplication: true}
	b.LoseProducerSuccess(1)
	if _, err := c.CreateProducer(context.Background(), opts); err == nil {
		t.Fatal("the first creation succeeded without an answer")
	}
	p, err := c.CreateProducer(context.Background(), opts)
	if err != nil {
		t.Fatalf("the next producer of the name: %v, want it created", err)
	}
	p.Close()
}
