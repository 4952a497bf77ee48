package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// registrationRaces is how many times each race test closes a connection right after
// the broker's answer. Before the fix, each cycle lost the registration with a good
// chance (the close reached the handler before connect recorded the connection), so
// a run of this many passed only by extreme luck.
const registrationRaces = 40

// TestProducerRegistrationSurvivesCloseRightAfterProducerSuccess closes the connection
// right after the broker answered PRODUCER, over and over: every time, the producer
// must notice that its new registration is dead, register again, and deliver.
func TestProducerRegistrationSurvivesCloseRightAfterProducerSuccess(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	// Even the creation survives the race (it retries on a fresh connection).
	b.CloseAfterAnswering(pb.BaseCommand_PRODUCER, 1)
	p := producer(t, c, pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1})
	for i := range registrationRaces {
		before := b.Frames(pb.BaseCommand_PRODUCER)
		b.CloseAfterAnswering(pb.BaseCommand_PRODUCER, 1)
		b.DropConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "m-%d", i)})
		cancel()
		if err != nil {
			t.Fatalf("cycle %d: the producer did not come back after its connection closed right after PRODUCER_SUCCESS: %v", i, err)
		}
		if n := b.Frames(pb.BaseCommand_PRODUCER) - before; n < 2 {
			t.Fatalf("cycle %d: %d PRODUCER frames; want the lost registration and a new one", i, n)
		}
	}
	if got := len(b.Messages("persistent://public/default/fault")); got != registrationRaces {
		t.Fatalf("the broker has %d messages, want %d", got, registrationRaces)
	}
}

// TestConsumerRegistrationSurvivesCloseRightAfterSubscribeSuccess is the consumer's
// version: the connection closes right after SUCCESS of SUBSCRIBE; the consumer must
// subscribe again and go on receiving.
func TestConsumerRegistrationSurvivesCloseRightAfterSubscribeSuccess(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	const topic = "persistent://public/default/race"
	b.CloseAfterAnswering(pb.BaseCommand_SUBSCRIBE, 1)
	cons, err := c.Subscribe(context.Background(), pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "s",
		Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for i := range registrationRaces {
		before := b.Frames(pb.BaseCommand_SUBSCRIBE)
		b.CloseAfterAnswering(pb.BaseCommand_SUBSCRIBE, 1)
		b.DropConnections()
		want := fmt.Sprintf("m-%d", i)
		b.Deliver(topic, pulsartest.Outgoing{Metadata: &pb.MessageMetadata{ProducerName: strp("p"), SequenceId: u64p(uint64(i)), PublishTime: u64p(1)}, Payload: []byte(want)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			t.Fatalf("cycle %d: the consumer did not come back after its connection closed right after SUBSCRIBE's SUCCESS: %v", i, err)
		}
		if got := string(m.Payload()); got != want {
			t.Fatalf("cycle %d: received %q, want %q", i, got, want)
		}
		if n := b.Frames(pb.BaseCommand_SUBSCRIBE) - before; n < 2 {
			t.Fatalf("cycle %d: %d SUBSCRIBE frames; want the lost subscription and a new one", i, n)
		}
	}
}

// TestConsumerEndsOnPermanentRefusal: a resubscription refused for a reason retrying
// cannot cure (authorization) ends the consumer with a typed error on Receive instead
// of resubscribing for ever; a temporary refusal before it is retried.
func TestConsumerEndsOnPermanentRefusal(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	const topic = "persistent://public/default/refused"
	cons, err := c.Subscribe(context.Background(), pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "s",
		Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	b.RefuseNext(pb.BaseCommand_SUBSCRIBE, pb.ServerError_ServiceNotReady, pb.ServerError_AuthorizationError)
	b.DropConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = cons.Receive(ctx)
	if !errors.Is(err, pulsar.ErrConsumerFailed) {
		t.Fatalf("Receive: %v; want ErrConsumerFailed", err)
	}
	var se *pulsar.ServerError
	if !errors.As(err, &se) || se.Code != pulsar.CodeAuthorization {
		t.Fatalf("Receive: %v; want it to wrap the broker's AuthorizationError", err)
	}
	if n := b.Refusals(pb.BaseCommand_SUBSCRIBE); n != 0 {
		t.Fatalf("%d refusals unused: the temporary one was not retried", n)
	}
	// Ended for good: no more attempts, and Receive keeps saying so.
	subs := b.Frames(pb.BaseCommand_SUBSCRIBE)
	if _, err := cons.Receive(ctx); !errors.Is(err, pulsar.ErrConsumerFailed) {
		t.Fatalf("second Receive: %v; want ErrConsumerFailed", err)
	}
	if n := b.Frames(pb.BaseCommand_SUBSCRIBE); n != subs {
		t.Fatalf("the failed consumer subscribed again (%d SUBSCRIBE frames, was %d)", n, subs)
	}
}

// TestProducerFailsOnPermanentRefusalButRetriesTemporaryOnes: a re-registration refused
// with ServiceNotReady and a backlog quota is retried; AuthorizationError fails the producer.
func TestProducerFailsOnPermanentRefusalButRetriesTemporaryOnes(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	p := producer(t, c, pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1})
	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_ServiceNotReady, pb.ServerError_ProducerBlockedQuotaExceededException,
		pb.ServerError_ProducerBlockedQuotaExceededError)
	b.DropConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after temporary refusals")}); err != nil {
		t.Fatalf("send after temporary refusals: %v", err)
	}
	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_AuthorizationError)
	b.DropConnections()
	_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after a permanent refusal")})
	var se *pulsar.ServerError
	if !errors.Is(err, pulsar.ErrProducerFailed) || !errors.As(err, &se) || se.Code != pulsar.CodeAuthorization {
		t.Fatalf("send after AuthorizationError: %v; want ErrProducerFailed wrapping it", err)
	}
}

func strp(s string) *string { return &s }
func u64p(v uint64) *uint64 { return &v }
