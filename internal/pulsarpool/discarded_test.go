package pulsarpool

import (
	"context"
	"testing"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
	"github.com/recordio-bridge/bridge/telemetry"
)

// TestSubscriberCountsDiscardedMessages: what egress consumers drop before delivery (a
// bad checksum, metadata that does not parse) shows in the metrics' figures, and stays
// counted once the consumer closed.
func TestSubscriberCountsDiscardedMessages(t *testing.T) {
	b := fakeBroker(t)
	s := NewSubscriber(newClient(t, b.URL()), nil)
	const topic = "persistent://public/default/discarded"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	empty := []byte{} // a MessageMetadata with no field set
	b.Deliver(topic,
		pulsartest.Outgoing{RawMetadata: empty, Payload: []byte("bad crc"), Corrupt: true},
		pulsartest.Outgoing{RawMetadata: []byte{0xff, 0xff, 0xff}, Payload: []byte("bad metadata")},
		pulsartest.Outgoing{RawMetadata: empty, Payload: []byte("good")})
	d, err := sub.Receive(ctx)
	if err != nil || string(d.Payload) != "good" {
		t.Fatalf("received %v, %v; want the good message only", d, err)
	}
	var st telemetry.PulsarStats
	s.AddStats(&st)
	if st.Corrupt != 1 || st.Malformed != 1 {
		t.Fatalf("stats %+v: want 1 corrupt and 1 malformed", st)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	var after telemetry.PulsarStats
	s.AddStats(&after)
	if after.Corrupt != 1 || after.Malformed != 1 {
		t.Fatalf("after close, stats %+v: want 1 corrupt and 1 malformed still", after)
	}
}
