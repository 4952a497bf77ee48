package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// batchAt is batchOf at a fixed ledger and entry, so a test can deliver it again as the
// broker redelivers an entry.
func batchAt(entry uint64, redeliveries uint32, ackSet []int64, payloads ...string) pulsartest.Outgoing {
	m := batchOf(payloads...)
	m.LedgerID, m.EntryID, m.RedeliveryCount, m.AckSet = 9, entry, redeliveries, ackSet
	return m
}

func receiveN(t *testing.T, cons *pulsar.Consumer, n int) []*pulsar.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*pulsar.Message
	for range n {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", len(out), n, err)
		}
		out = append(out, m)
	}
	return out
}

// awaitRedelivers waits for the consumer's n-th redelivery request on faultTopic.
func awaitRedelivers(t *testing.T, b *pulsartest.Broker, n int) []pulsartest.RedeliverRecord {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs := b.Redelivers(faultTopic)
		if len(rs) >= n {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d redelivery requests, want %d: a nacked message never comes back", len(rs), n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ackedIndexes is what the broker was told of entry 9:entry: every index when it was
// acknowledged whole, else the indexes some ack_set cleared.
func ackedIndexes(b *pulsartest.Broker, entry uint64, size int) map[int]bool {
	out := map[int]bool{}
	for _, a := range b.Acks(faultTopic) {
		for _, id := range a.IDs {
			if id.GetLedgerId() != 9 || id.GetEntryId() != entry {
				continue
			}
			for i := range size {
				if len(id.GetAckSet()) == 0 || id.GetAckSet()[i/64]&(1<<(i%64)) == 0 {
					out[i] = true
				}
			}
		}
	}
	return out
}

func payloads(ms []*pulsar.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Payload())
	}
	return out
}

// TestANackedMessageInsideABatchComesBack: a message of a batch is nacked, and its
// batch-mates are acknowledged after the nack. Acknowledging a batch-mate used to forget
// the nack of the whole entry, so the message never came back (nor reached its
// dead-letter topic). It is asked back once its delay has passed; when the broker
// redelivers the entry (here without an ack_set, as a broker without batch-index
// acknowledgements does), the acknowledged batch-mates are not delivered again, and
// neither is one the application still holds on a Shared or Key_Shared subscription,
// where only the nacked entry goes back (on Exclusive and Failover ones everything
// unacknowledged is redelivered: the held one comes again). The batch is acknowledged
// in the end, index by index.
func TestANackedMessageInsideABatchComesBack(t *testing.T) {
	for _, typ := range []pulsar.SubscriptionType{pulsar.Shared, pulsar.KeyShared, pulsar.Exclusive, pulsar.Failover} {
		t.Run(typ.String(), func(t *testing.T) {
			b := fakeBroker(t)
			cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: typ, BatchIndexAck: true,
				NackRedeliveryDelay: 20 * time.Millisecond, AckGroupTime: 5 * time.Millisecond})
			b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "poison", "c", "held"))
			ms := receiveN(t, cons, 4)
			cons.Nack(ms[1])
			_ = cons.Ack(ms[0]) // after the nack: it used to cancel it
			_ = cons.Ack(ms[2])
			rs := awaitRedelivers(t, b, 1)
			if shared := typ == pulsar.Shared || typ == pulsar.KeyShared; shared {
				if ids := rs[0].IDs; len(ids) != 1 || ids[0].GetLedgerId() != 9 || ids[0].GetEntryId() != 1 {
					t.Fatalf("redelivery request for %v, want entry 9:1", ids)
				}
			} else if len(rs[0].IDs) != 0 {
				t.Fatalf("redelivery request for %v, want everything unacknowledged", rs[0].IDs)
			}
			if acked := ackedIndexes(b, 1, 4); !acked[0] || !acked[2] || acked[1] || acked[3] {
				t.Fatalf("before the redelivery request the broker knew indexes %v acknowledged, want 0 and 2", acked)
			}
			b.Deliver(faultTopic, batchAt(1, 1, nil, "a", "poison", "c", "held"), single("next"))
			want := []string{"poison", "next"}
			if typ == pulsar.Exclusive || typ == pulsar.Failover {
				want = []string{"poison", "held", "next"}
			}
			again := receiveN(t, cons, len(want))
			if got := payloads(again); !equal(got, want) {
				t.Fatalf("after the redelivery: %q, want %q", got, want)
			}
			if again[0].ID.BatchIndex != 1 || again[0].ID.BatchSize != 4 {
				t.Fatalf("the nacked message came back as %+v", again[0].ID)
			}
			if typ == pulsar.Shared || typ == pulsar.KeyShared {
				if again[0].RedeliveryCount != 1 {
					t.Fatalf("redelivery count %d, want 1", again[0].RedeliveryCount)
				}
			}
			_ = cons.Ack(again[0])
			_ = cons.Ack(ms[3])
			deadline := time.Now().Add(10 * time.Second)
			for acked := ackedIndexes(b, 1, 4); len(acked) < 4; acked = ackedIndexes(b, 1, 4) {
				if time.Now().After(deadline) {
					t.Fatalf("the broker knows indexes %v acknowledged, want all 4", acked)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if n := cons.Stats().BatchTrackers; n != 0 {
				t.Fatalf("%d batch trackers left after the batch was acknowledged", n)
			}
		})
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestABatchMessagesRedeliveryCountIsItsOwn: the broker counts redeliveries per entry,
// so each nack of one message of a batch raises the count of all of them, and an
// acknowledgement of any of them resets it (Pulsar 4.0.8 does both). A message nacked
// twice comes back with counts 1 and 2 though a batch-mate's acknowledgement reset the
// broker's count to 0 in between; a batch-mate that was never nacked is not delivered
// again with it (the application holds it), and when it is nacked at last it comes back
// with a count of its own redeliveries, 1, not the entry's 3: with retry.maxDeliveries
// it would otherwise be dead-lettered on its first failure, and a poison message
// delivered one time too many.
func TestABatchMessagesRedeliveryCountIsItsOwn(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, BatchIndexAck: true,
		NackRedeliveryDelay: 10 * time.Millisecond, AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "poison", "once", "slow"))
	first := receiveN(t, cons, 3)
	slow := first[2]
	cons.Nack(first[0])
	cons.Nack(first[1])
	awaitRedelivers(t, b, 1)
	b.Deliver(faultTopic, batchAt(1, 1, nil, "poison", "once", "slow"), single("marker"))
	got := receiveN(t, cons, 3)
	if p := payloads(got); !equal(p, []string{"poison", "once", "marker"}) || got[0].RedeliveryCount != 1 || got[1].RedeliveryCount != 1 {
		t.Fatalf("first redelivery: %q with counts %d, %d; want the nacked messages only, with count 1", p, got[0].RedeliveryCount, got[1].RedeliveryCount)
	}
	_ = cons.Ack(got[1]) // the broker forgets the entry's count
	cons.Nack(got[0])
	awaitRedelivers(t, b, 2)
	b.Deliver(faultTopic, batchAt(1, 1, []int64{0b101}, "poison", "once", "slow"), single("marker"))
	got = receiveN(t, cons, 2)
	if p := payloads(got); !equal(p, []string{"poison", "marker"}) || got[0].RedeliveryCount != 2 {
		t.Fatalf("second redelivery: %q with count %d; want the poison message with count 2", p, got[0].RedeliveryCount)
	}
	cons.Nack(got[0])
	awaitRedelivers(t, b, 3)
	b.Deliver(faultTopic, batchAt(1, 2, []int64{0b101}, "poison", "once", "slow"), single("marker"))
	got = receiveN(t, cons, 2)
	if got[0].RedeliveryCount != 3 {
		t.Fatalf("third redelivery: count %d, want 3", got[0].RedeliveryCount)
	}
	_ = cons.Ack(got[0])
	cons.Nack(slow)
	awaitRedelivers(t, b, 4)
	b.Deliver(faultTopic, batchAt(1, 3, []int64{0b100}, "poison", "once", "slow"))
	got = receiveN(t, cons, 1)
	if string(got[0].Payload()) != "slow" || got[0].RedeliveryCount != 1 {
		t.Fatalf("%q with redelivery count %d, want %q with 1", got[0].Payload(), got[0].RedeliveryCount, "slow")
	}
}

// TestBatchNacksWaitForTheLatestDelay: two messages of one entry nacked with different
// delays go back together (the broker redelivers entries), not before the longer delay:
// a later nack with a shorter delay used to replace the earlier one's, and the message
// nacked for longer came back early.
func TestBatchNacksWaitForTheLatestDelay(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "long", "short"))
	ms := receiveN(t, cons, 2)
	const long = 300 * time.Millisecond
	start := time.Now()
	cons.NackAfter(ms[0], long)
	cons.NackAfter(ms[1], 0)
	awaitRedelivers(t, b, 1)
	if waited := time.Since(start); waited < long {
		t.Fatalf("the entry was asked back after %v, before the %v its first message was nacked for", waited, long)
	}
	if rs := b.Redelivers(faultTopic); len(rs) != 1 || len(rs[0].IDs) != 1 {
		t.Fatalf("redelivery requests %v, want one for the entry", rs)
	}
}

// TestRedeliverAllSendsGroupedAcksFirst: acknowledgements still grouped when everything
// unacknowledged is asked back go first, so the broker does not redeliver what the
// application acknowledged.
func TestRedeliverAllSendsGroupedAcksFirst(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Exclusive, BatchIndexAck: true, AckGroupTime: time.Hour})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b"))
	ms := receiveN(t, cons, 2)
	_ = cons.Ack(ms[0])
	cons.RedeliverUnacknowledged()
	awaitRedelivers(t, b, 1)
	if acked := ackedIndexes(b, 1, 2); !acked[0] {
		t.Fatalf("the redelivery request went before the acknowledgement of index 0 (acknowledged: %v)", acked)
	}
	if n := b.Frames(pb.BaseCommand_ACK); n != 1 {
		t.Fatalf("%d ACK frames, want 1", n)
	}
}

// TestRedeliverAllAfterABatchWasHandedBackDeliversItWhole: a batch whose first message
// was nacked goes back for that message only, its other messages still queued here;
// RedeliverUnacknowledged then drops the queue and asks everything back, so all of the
// batch must come again, not only the nacked message (the queued ones would be lost to
// this consumer until it reconnects).
func TestRedeliverAllAfterABatchWasHandedBackDeliversItWhole(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, BatchIndexAck: true,
		NackRedeliveryDelay: 10 * time.Millisecond, AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b", "c"))
	cons.Nack(receiveN(t, cons, 1)[0])
	awaitRedelivers(t, b, 1)
	cons.RedeliverUnacknowledged()
	awaitRedelivers(t, b, 2)
	b.Deliver(faultTopic, batchAt(1, 1, nil, "a", "b", "c"))
	if got := payloads(receiveN(t, cons, 3)); !equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("after redelivering everything: %q, want the whole batch", got)
	}
}
