package pulsar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// A producer created with ExclusiveWithFencing by another client (another process) takes
// the topic over at once, while the old producer still has a message in flight: the old
// one is closed by the broker, is refused with ProducerFenced when it registers again
// with its topic epoch, fails its pending message and stops for good without
// reconnecting; the old client's other producers go on.
func TestExclusiveWithFencingTakesTheTopicOverAndTheOldProducerStopsForGood(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	const topic = "persistent://public/default/takeover"
	opts := pulsar.ProducerOptions{Topic: topic, Name: "stream-s", Deduplication: true, DisableBatching: true,
		AccessMode: pulsar.AccessExclusiveWithFencing}
	c1, c2 := client(t, b.URL()), client(t, b.URL())
	old := producer(t, c1, opts)
	other := producer(t, c1, pulsar.ProducerOptions{Topic: "persistent://public/default/elsewhere"})
	if _, errs := sendSeqs(t, old, 0, 1); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	b.HoldReceipts(true)
	inflight := make(chan error, 1)
	seq := int64(2)
	old.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte("s-2"), SequenceID: &seq},
		func(_ pulsar.MessageID, err error) { inflight <- err })
	waitFor(t, "the message in flight stored", func() bool { return len(b.Messages(topic)) == 3 })

	successor := producer(t, c2, opts) // would wait for the old one's close with a shared name
	select {
	case err := <-inflight:
		if !errors.Is(err, pulsar.ErrProducerFenced) || !errors.Is(err, pulsar.ErrProducerFailed) {
			t.Fatalf("the old producer's message in flight failed with %v, want ErrProducerFenced and ErrProducerFailed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the old producer's message in flight did not fail after the takeover")
	}
	if !errors.Is(old.Err(), pulsar.ErrProducerFenced) {
		t.Fatalf("old producer's Err() = %v, want ErrProducerFenced", old.Err())
	}
	b.HoldReceipts(false)
	// The old producer's fenced registration closed the successor too, as the broker
	// does (ExclusiveWithFencing closes every producer before it checks the epoch): the
	// successor registers again and its sends go through.
	if _, errs := sendSeqs(t, successor, 2, 3); errs[0] != nil || errs[1] != nil {
		t.Fatal(errors.Join(errs...))
	}
	registrations := b.Frames(pb.BaseCommand_PRODUCER)
	time.Sleep(500 * time.Millisecond) // five times the backoff's longest wait
	if n := b.Frames(pb.BaseCommand_PRODUCER); n != registrations {
		t.Fatalf("%d more registrations; the fenced producer must stop for good", n-registrations)
	}
	seq = 4
	if _, err := old.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("late"), SequenceID: &seq}); !errors.Is(err, pulsar.ErrProducerFenced) {
		t.Fatalf("a send on the fenced producer = %v, want ErrProducerFenced", err)
	}
	if _, err := other.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatalf("the old client's producer of another topic: %v", err)
	}
	var got []string
	for _, m := range b.Messages(topic) {
		got = append(got, string(m.Payload))
	}
	if want := []string{"s-0", "s-1", "s-2", "s-3"}; len(got) != len(want) || got[2] != "s-2" || got[3] != "s-3" {
		t.Fatalf("stored %q, want %q (s-2 once: its resend by the successor is a duplicate)", got, want)
	}
}

// A shared producer cannot register while an exclusive one holds the topic; an
// Exclusive producer cannot register while another producer does: both are told so,
// the first as a temporary refusal (ProducerBusy), the second as ErrProducerFenced.
func TestAccessModesRefuseWhatTheTopicsExclusiveProducerExcludes(t *testing.T) {
	b := fakeBroker(t)
	const topic = "persistent://public/default/exclusive"
	c := client(t, b.URL())
	producer(t, c, pulsar.ProducerOptions{Topic: topic, AccessMode: pulsar.AccessExclusive})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	var se *pulsar.ServerError
	if !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_ProducerBusy) || !pulsar.IsRetryable(err) {
		t.Fatalf("a shared producer beside an exclusive one: %v, want a retryable ProducerBusy", err)
	}
	_, err = c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: topic, AccessMode: pulsar.AccessExclusive})
	if !errors.Is(err, pulsar.ErrProducerFenced) {
		t.Fatalf("a second exclusive producer: %v, want ErrProducerFenced", err)
	}
}
