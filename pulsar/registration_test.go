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
// with ServiceNotReady or a backlog quota is retried; with the producer_exception policy
// the pending message fails at once with a temporary error, with producer_request_hold
// it waits; AuthorizationError fails the producer.
func TestProducerFailsOnPermanentRefusalButRetriesTemporaryOnes(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	p := producer(t, c, pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_ServiceNotReady, pb.ServerError_ProducerBlockedQuotaExceededError)
	b.DropConnections()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("held")}); err != nil {
		t.Fatalf("send while refused with ServiceNotReady and producer_request_hold: %v", err)
	}
	if n := b.Refusals(pb.BaseCommand_PRODUCER); n != 0 {
		t.Fatalf("%d refusals unused", n)
	}

	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_ProducerBlockedQuotaExceededException)
	b.DropConnections()
	_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("refused for now")})
	var se *pulsar.ServerError
	if !pulsar.IsRetryable(err) || !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_ProducerBlockedQuotaExceededException) {
		t.Fatalf("send while refused with producer_exception: %v; want a temporary error wrapping the quota refusal", err)
	}
	// The producer keeps reconnecting and is accepted again: retry as a client told
	// "retry later" would, until the context's deadline.
	for {
		_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after the quota")})
		if err == nil {
			break
		}
		if !pulsar.IsRetryable(err) || ctx.Err() != nil {
			t.Fatalf("send after the quota refusal ended: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_AuthorizationError)
	b.DropConnections()
	_, err = p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after a permanent refusal")})
	if !errors.Is(err, pulsar.ErrProducerFailed) || !errors.As(err, &se) || se.Code != pulsar.CodeAuthorization {
		t.Fatalf("send after AuthorizationError: %v; want ErrProducerFailed wrapping it", err)
	}
}

// TestSendErrorNotAllowedFailsOnlyThatMessage: NotAllowedError (a topic's maxMessageSize
// below the broker's) fails the message it names; the producer goes on.
func TestSendErrorNotAllowedFailsOnlyThatMessage(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{DisableBatching: true})
	b.FailNextSends(int32(pb.ServerError_NotAllowedError))
	wait := sendAll(t, p, 5)
	errs := wait()
	var se *pulsar.ServerError
	if len(errs) != 1 || !errors.As(errs[0], &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_NotAllowedError) {
		t.Fatalf("errors by message: %v; want only message 0 refused with NotAllowedError", errs)
	}
	if errors.Is(errs[0], pulsar.ErrProducerFailed) {
		t.Fatalf("the producer failed: %v", errs[0])
	}
	if got := len(b.Messages("persistent://public/default/fault")); got != 4 {
		t.Fatalf("the broker holds %d messages, want the 4 others", got)
	}
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("next")}); err != nil {
		t.Fatalf("the next message: %v", err)
	}
}

func strp(s string) *string { return &s }
func u64p(v uint64) *uint64 { return &v }

// TestBackoffKeepsGrowingWhenRegistrationsDieAtOnce: a broker that accepts a producer and
// closes the connection at once, again and again, must see the producer back off more
// each time, not re-register in a tight loop (thousands of reconnects a
// second, disconnecting every producer and consumer on the connection). Only a lower
// bound on the time is checked, so a slow machine cannot fail it.
func TestBackoffKeepsGrowingWhenRegistrationsDieAtOnce(t *testing.T) {
	b := fakeBroker(t)
	const initial, deaths = 40 * time.Millisecond, 5
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{DisableBatching: true, SendTimeout: -1,
		Backoff: pulsar.Backoff{Initial: initial, Multiplier: 2, Jitter: 0.01, Max: 10 * time.Second}})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	before := b.Frames(pb.BaseCommand_PRODUCER)
	b.CloseAfterAnswering(pb.BaseCommand_PRODUCER, deaths)
	start := time.Now()
	b.DropConnections() // a stable registration lost: the first attempt goes at once
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("the producer did not come back after %d registrations died at once: %v", deaths, err)
	}
	elapsed := time.Since(start)
	// Each registration that dies at once doubles the wait: 40+80+160+320+640 ms.
	var want time.Duration
	for i := range deaths {
		want += initial << i
	}
	want = want * 99 / 100 // the jitter
	if elapsed < want {
		t.Fatalf("%d registrations that died at once were retried within %v; a growing backoff takes at least %v", deaths, elapsed, want)
	}
	if n := b.Frames(pb.BaseCommand_PRODUCER) - before; n != deaths+1 {
		t.Fatalf("%d PRODUCER frames after the drop, want %d (each dead registration, then the one that lasts)", n, deaths+1)
	}
}
