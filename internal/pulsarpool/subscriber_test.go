package pulsarpool

import (
	"context"
	"errors"
	"testing"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/telemetry"
)

func TestSubscriberDeliversAcksAndKeepsItsCounters(t *testing.T) {
	b := fakeBroker(t)
	s := NewSubscriber(newClient(t, b.URL()))
	const topic = "persistent://public/default/sub"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.DeliverPayloads(topic, []byte("one"), []byte("two"))
	for _, want := range []string{"one", "two"} {
		d, err := sub.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Payload) != want || d.Topic != topic || d.ID == "" {
			t.Fatalf("delivery %+v, want %q on %s", d, want, topic)
		}
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	var st telemetry.PulsarStats
	s.AddStats(&st)
	if st.PermitsGranted == 0 {
		t.Fatalf("stats %+v: no permits counted for an open consumer", st)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	var after telemetry.PulsarStats
	s.AddStats(&after)
	if after.PermitsGranted < st.PermitsGranted {
		t.Fatalf("permits went back from %d to %d when the consumer closed", st.PermitsGranted, after.PermitsGranted)
	}
	if len(b.Acks(topic)) == 0 {
		t.Fatal("the broker saw no ACK")
	}
}

func TestSubscriberAgainstAnUnreachableBrokerIsUnavailable(t *testing.T) {
	s := NewSubscriber(newClient(t, unreachable(t)))
	_, err := s.Subscribe(context.Background(), egress.SubscribeOptions{Topics: []string{"persistent://public/default/x"}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if !errors.Is(err, egress.ErrUnavailable) {
		t.Fatalf("err = %v, want egress.ErrUnavailable", err)
	}
}
