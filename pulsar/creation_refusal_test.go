package pulsar_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestCreationRetriesABrokerWhoseMetadataIsMoving: right after a broker resumes from a
// freeze (its metadata session expired, so it re-acquires its namespace bundles) or
// while a bundle is unloaded, lookups and registrations are refused for moments with
// MetadataError, ServiceNotReady or TooManyRequests. Creating a producer or consumer
// then failed at once (a CI run lost a test to one such lookup); it retries them
// within its deadline, at every step of the creation.
func TestCreationRetriesABrokerWhoseMetadataIsMoving(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	steps := []pb.BaseCommand_Type{pb.BaseCommand_PARTITIONED_METADATA, pb.BaseCommand_LOOKUP}
	for _, s := range steps {
		b.RefuseNext(s, pb.ServerError_MetadataError, pb.ServerError_TooManyRequests)
	}
	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_ServiceNotReady, pb.ServerError_MetadataError)
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "moving", Backoff: pulsar.Backoff{Initial: 5 * time.Millisecond}})
	if err != nil {
		t.Fatalf("CreateProducer while the broker's metadata moves: %v", err)
	}
	defer p.Close()
	for _, s := range append(steps, pb.BaseCommand_PRODUCER) {
		if n := b.Refusals(s); n != 0 {
			t.Fatalf("%d refusals of %s unused", n, s)
		}
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m")}); err != nil {
		t.Fatal(err)
	}

	for _, s := range steps {
		b.RefuseNext(s, pb.ServerError_ServiceNotReady)
	}
	b.RefuseNext(pb.BaseCommand_SUBSCRIBE, pb.ServerError_MetadataError, pb.ServerError_ServiceNotReady)
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{"moving"}, Subscription: "s",
		Backoff: pulsar.Backoff{Initial: 5 * time.Millisecond}})
	if err != nil {
		t.Fatalf("Subscribe while the broker's metadata moves: %v", err)
	}
	defer cons.Close()
	for _, s := range append(steps, pb.BaseCommand_SUBSCRIBE) {
		if n := b.Refusals(s); n != 0 {
			t.Fatalf("%d refusals of %s unused", n, s)
		}
	}
}

// TestCreationReportsARefusalThatOutlastsItsDeadline: a broker that keeps refusing
// with a transient code fails the creation when its deadline comes, with the broker's
// error (callers classify it as temporary), not with the deadline; and a permanent
// refusal still fails at once, without a retry.
func TestCreationReportsARefusalThatOutlastsItsDeadline(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	refusals := make([]pb.ServerError, 1000)
	for i := range refusals {
		refusals[i] = pb.ServerError_MetadataError
	}
	b.RefuseNext(pb.BaseCommand_LOOKUP, refusals...)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "stuck", Backoff: pulsar.Backoff{Initial: 20 * time.Millisecond}})
	var se *pulsar.ServerError
	if !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_MetadataError) || !pulsar.IsRetryable(err) {
		t.Fatalf("CreateProducer refused until its deadline: %v; want the broker's MetadataError", err)
	}
	if !errors.Is(err, pulsar.ErrLookup) {
		t.Fatalf("CreateProducer: %v; want it to say the lookup failed", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("CreateProducer returned %s after a 700ms deadline", d)
	}
	if used := 1000 - b.Refusals(pb.BaseCommand_LOOKUP); used < 3 {
		t.Fatalf("only %d lookups in 700ms: the transient refusal was not retried", used)
	}

	b = fakeBroker(t) // the first one's refusals are not all used
	c = client(t, b.URL())
	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_AuthorizationError, pb.ServerError_AuthorizationError)
	_, err = c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "forbidden", Backoff: pulsar.Backoff{Initial: 5 * time.Millisecond}})
	if !errors.As(err, &se) || se.Code != pulsar.CodeAuthorization {
		t.Fatalf("CreateProducer refused with AuthorizationError: %v", err)
	}
	if n := b.Refusals(pb.BaseCommand_PRODUCER); n != 1 {
		t.Fatalf("a permanent refusal was retried (%d of 2 refusals left)", n)
	}
}
