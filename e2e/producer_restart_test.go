package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestProducerSurvivesBrokerKill9WithDeduplication publishes a steady stream while the
// broker is killed with SIGKILL and restarted. With deduplication on, every message is
// in the topic exactly once: those receipted before the kill, and those that were
// pending and had to be resent, in order, with their original sequence ids.
func TestProducerSurvivesBrokerKill9WithDeduplication(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("broker not started by pulsar.sh; cannot kill it")
	}
	ns := b.Namespace(t, "dedup")
	b.SetDeduplication(t, ns, true)
	topic := "persistent://" + ns + "/" + broker.Name("kill9")

	// The subscription is made before anything is sent (and its consumer closed, so the
	// kill redelivers nothing to it): it is what keeps the messages. Without one, the
	// broker deletes the ledger the kill closed as soon as the deduplication cursor's
	// snapshot has moved past it (no retention is configured), and the messages stored
	// before the kill are gone for want of a reader, not lost by the producer.
	theirs := newOfficialClient(t, b)
	subscribe := func() official.Consumer {
		cons, err := theirs.Subscribe(official.ConsumerOptions{Topic: topic, SubscriptionName: "verify", SubscriptionInitialPosition: official.SubscriptionPositionEarliest})
		if err != nil {
			t.Fatal(err)
		}
		return cons
	}
	subscribe().Close()

	ours := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	prod, err := ours.CreateProducer(ctx, pulsar.ProducerOptions{
		Topic: topic, SendTimeout: 3 * time.Minute, BatchingMaxMessages: 50,
		Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	const total = 4000
	var mu sync.Mutex
	var before, after, failed int
	killed := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(total)
	go func() {
		for i := range total {
			if i == total/2 {
				close(killed)
			}
			prod.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i))}, func(_ pulsar.MessageID, err error) {
				mu.Lock()
				defer mu.Unlock()
				select {
				case <-killed:
					after++
				default:
					before++
				}
				if err != nil {
					failed++
					t.Errorf("message %d failed: %v", i, err)
				}
				wg.Done()
			})
			time.Sleep(200 * time.Microsecond)
		}
	}()
	<-killed
	b.Restart(t) // kill -9, then start on the same data
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of %d sends failed", failed, total)
	}
	stats := prod.Stats()
	t.Logf("receipts: %d for messages queued before the kill, %d after; reconnects: %d; batches resent: %d",
		before, after, stats.Reconnects, stats.Resent)
	if stats.Reconnects == 0 || stats.Resent == 0 {
		t.Fatal("the producer never reconnected or resent anything: the kill did not hit it")
	}

	cons := subscribe()
	defer cons.Close()
	seen := map[string]int{}
	last := -1
	for len(seen) < total {
		rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
		msg, err := cons.Receive(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("after %d distinct messages: %v", len(seen), err)
		}
		seen[string(msg.Payload())]++
		var i int
		fmt.Sscanf(string(msg.Payload()), "m-%d", &i)
		if i <= last {
			t.Fatalf("order broken: %s after m-%05d", msg.Payload(), last)
		}
		last = i
		cons.Ack(msg)
	}
	// Nothing more: a duplicate would arrive here.
	rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
	defer rcancel()
	if msg, err := cons.Receive(rctx); err == nil {
		t.Fatalf("extra message %q: a duplicate", msg.Payload())
	}
	for i := range total {
		if n := seen[fmt.Sprintf("m-%05d", i)]; n != 1 {
			t.Fatalf("m-%05d present %d times", i, n)
		}
	}
}
