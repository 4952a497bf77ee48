package pulsarpool

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestJavaIDIsTheJavaClientsForm: ORIGIN_MESSAGE_ID is written as the Java client's
// MessageId.toString, so tools reading its dead-letter topics parse the bridge's.
func TestJavaIDIsTheJavaClientsForm(t *testing.T) {
	for want, id := range map[string]pulsar.MessageID{
		"7:42:-1":  {LedgerID: 7, EntryID: 42, Partition: -1, BatchIndex: -1},
		"7:42:3":   {LedgerID: 7, EntryID: 42, Partition: 3, BatchIndex: -1},
		"7:42:3:5": {LedgerID: 7, EntryID: 42, Partition: 3, BatchIndex: 5, BatchSize: 10},
	} {
		if got := javaID(id); got != want {
			t.Errorf("%+v: %q, want %q", id, got, want)
		}
	}
}

// TestADeadLetteredBatchMessageGoesAloneWithTheJavaClientsProperties: the second
// message of a batch is dead-lettered: only it reaches the dead-letter topic, with its
// own payload, key and properties plus the properties Pulsar's Java client writes
// (REAL_TOPIC, REAL_SUBSCRIPTION, ORIGIN_MESSAGE_ID as ledger:entry:partition:batchIndex
// and its legacy name), and a property the message had already is kept, as the Java
// client keeps it. Its acknowledgement is by batch index: the batch-mate stays
// unacknowledged.
func TestADeadLetteredBatchMessageGoesAloneWithTheJavaClientsProperties(t *testing.T) {
	b := fakeBroker(t)
	c := newClient(t, b.URL())
	pool, _ := newPool(t, c, Options{})
	s := NewSubscriber(c, nil)
	s.DeadLetters(pool)
	const topic, dlq = "persistent://public/default/batch-dlq", "persistent://public/default/batch-dlq-DLQ"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "out", Type: "shared", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	b.DeliverBatch(topic, 9, 4,
		pulsartest.BatchMessage{Payload: []byte("keep"), Key: "k0", Properties: map[string]string{"i": "0"}},
		pulsartest.BatchMessage{Payload: []byte("poison\x00\xff"), Key: "k1", Properties: map[string]string{"i": "1", "REAL_TOPIC": "first"}})
	var ds []*egress.Delivery
	for range 2 {
		d, err := sub.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if err := sub.(egress.DeadLetterer).DeadLetter(ctx, ds[1], dlq); err != nil {
		t.Fatal(err)
	}
	if err := sub.Ack(ds[1]); err != nil {
		t.Fatal(err)
	}
	got := b.Messages(dlq)
	if len(got) != 1 {
		t.Fatalf("%d messages on the dead-letter topic, want 1", len(got))
	}
	want := map[string]string{"i": "1", "REAL_TOPIC": "first", "REAL_SUBSCRIPTION": "out",
		"ORIGIN_MESSAGE_ID": "9:4:-1:1", "ORIGIN_MESSAGE_IDY_TIME": "9:4:-1:1"}
	m := got[0]
	if string(m.Payload) != "poison\x00\xff" || m.Key != "k1" || !maps.Equal(m.Properties, want) {
		t.Fatalf("dead letter %q key %q properties %v; want %q key k1 properties %v", m.Payload, m.Key, m.Properties, "poison\x00\xff", want)
	}
	deadline := time.Now().Add(wait)
	for {
		var sets [][]int64
		for _, a := range b.Acks(topic) {
			for _, id := range a.IDs {
				if id.GetLedgerId() == 9 && id.GetEntryId() == 4 {
					sets = append(sets, id.GetAckSet())
				}
			}
		}
		if len(sets) > 0 {
			if len(sets) != 1 || len(sets[0]) != 1 || sets[0][0] != 0b01 {
				t.Fatalf("acknowledgements of the batch: ack sets %v, want one leaving index 0 outstanding (0b01)", sets)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the dead-lettered message was never acknowledged")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
