package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestSharedKeySharedAndFailoverOnTheRealBroker runs two consumers of one subscription
// for each type over two topics: Shared and Key_Shared deliver every message to exactly
// one of them (Key_Shared keeping each key on one consumer), and Failover gives one the
// stream and reports which is active.
func TestSharedKeySharedAndFailoverOnTheRealBroker(t *testing.T) {
	b := broker.Get(t)
	ours := newOurClient(t, b)
	for _, typ := range []pulsar.SubscriptionType{pulsar.Shared, pulsar.KeyShared, pulsar.Failover} {
		t.Run(typ.String(), func(t *testing.T) {
			topics := []string{b.Topic(t, "subtype-a"), b.Topic(t, "subtype-b")}
			var mu sync.Mutex
			active := map[string]int{}
			opts := pulsar.ConsumerOptions{Topics: topics, Subscription: "two", Type: typ, InitialPosition: pulsar.Earliest, ReceiverQueueSize: 20,
				OnActiveChange: func(topic string, on bool) {
					mu.Lock()
					if on {
						active[topic]++
					}
					mu.Unlock()
				}}
			c1 := ourSubscribe(t, ours, opts)
			c2 := ourSubscribe(t, ours, opts)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const perTopic, keys = 400, 10
			for _, topic := range topics {
				// Key_Shared routes whole entries by their key: batches of one key each.
				p, err := ours.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, BatchingByKey: true})
				if err != nil {
					t.Fatal(err)
				}
				for i := range perTopic {
					p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("%s/%d", topicName(topic), i)), Key: fmt.Sprint("k", i%keys)}, nil)
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				p.Close()
			}
			seen := map[string]int{}
			keyOwner := map[string]*pulsar.Consumer{}
			got := map[*pulsar.Consumer]int{}
			for len(seen) < 2*perTopic {
				var m *pulsar.Message
				var from *pulsar.Consumer
				for m == nil {
					for _, c := range []*pulsar.Consumer{c1, c2} {
						if msg, ok := c.TryReceive(); ok {
							m, from = msg, c
							break
						}
					}
					if m == nil {
						if ctx.Err() != nil {
							t.Fatalf("after %d of %d messages: %v", len(seen), 2*perTopic, ctx.Err())
						}
						time.Sleep(time.Millisecond)
					}
				}
				seen[string(m.Payload())]++
				got[from]++
				if typ == pulsar.KeyShared {
					k := m.Topic + "|" + m.Key
					if o, ok := keyOwner[k]; ok && o != from {
						t.Fatalf("key %s went to both consumers", k)
					}
					keyOwner[k] = from
				}
				from.Ack(m)
			}
			for p, n := range seen {
				if n != 1 {
					t.Fatalf("%s delivered %d times", p, n)
				}
			}
			switch typ {
			case pulsar.Shared:
				if got[c1] == 0 || got[c2] == 0 {
					t.Fatalf("a Shared subscription gave everything to one consumer: %d / %d", got[c1], got[c2])
				}
			case pulsar.Failover:
				mu.Lock()
				n := len(active)
				mu.Unlock()
				if n != len(topics) {
					t.Fatalf("OnActiveChange reported an active consumer for %d of %d topics", n, len(topics))
				}
			}
			t.Logf("%s: %d / %d messages per consumer", typ, got[c1], got[c2])
		})
	}
}
