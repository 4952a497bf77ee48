package pulsarpool

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/egress"
)

// A topicsPattern stream's consumer follows the namespace, and its figures reach the
// metrics by stream; the counters of a closed consumer are kept.
func TestSubscriberFollowsAPatternAndReportsItByStream(t *testing.T) {
	b := fakeBroker(t)
	b.SetTopicWatchers(true)
	const ns = "persistent://tenant/ns/"
	b.CreateTopic(ns+"orders-a", 0)
	s := NewSubscriber(newClient(t, b.URL()), nil)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{TopicsPattern: ns + "orders-.*", NewTopicsPosition: "earliest",
		DiscoveryInterval: time.Hour, Stream: "orders", Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.CreateTopic(ns+"orders-b", 0)
	b.DeliverPayloads(ns+"orders-b", []byte("b"))
	d, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Topic != ns+"orders-b" || string(d.Payload) != "b" {
		t.Fatalf("delivery %q of %s", d.Payload, d.Topic)
	}
	if err := sub.Ack(d); err != nil {
		t.Fatal(err)
	}
	ps := s.PatternStats()
	if len(ps) != 1 || ps[0].Stream != "orders" || ps[0].Topics != 2 || ps[0].Added != 1 || ps[0].Discovery["watching"] != 1 {
		t.Fatalf("pattern stats %+v; want stream orders with 2 topics, 1 added, 1 consumer watching", ps)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	ps = s.PatternStats()
	if len(ps) != 1 || ps[0].Added != 1 || ps[0].Topics != 0 {
		t.Fatalf("pattern stats after the close %+v; want the 1 added kept, 0 topics read", ps)
	}
}
