package pulsarpool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/telemetry"
)

func TestSubscriberDeliversAcksAndKeepsItsCounters(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(1 << 20)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.DeliverPayloads(topic, []byte("one"), []byte("three"))
	var ds []*egress.Delivery
	for _, want := range []string{"one", "three"} {
		d, err := sub.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Payload) != want || d.Topic != topic || d.ID == "" {
			t.Fatalf("delivery %+v, want %q on %s", d, want, topic)
		}
		ds = append(ds, d)
	}
	if used := bud.Stats().Used; used != 8 {
		t.Fatalf("budget holds %d bytes for two unacknowledged deliveries of 8", used)
	}
	for _, d := range ds {
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("budget holds %d bytes after the acks", used)
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
	s := NewSubscriber(newClient(t, unreachable(t)), nil)
	_, err := s.Subscribe(context.Background(), egress.SubscribeOptions{Topics: []string{"persistent://public/default/x"}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if !errors.Is(err, egress.ErrUnavailable) {
		t.Fatalf("err = %v, want egress.ErrUnavailable", err)
	}
}

// A spent budget pauses deliveries; what a closing subscription still held goes back.
func TestSubscriberWaitsForTheBudgetAndReturnsItOnClose(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(10)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub-budget"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "shared", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.DeliverPayloads(topic, []byte("eight..."), []byte("eight..."))
	first, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waiting, stopWaiting := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := sub.Receive(waiting)
		got <- err
	}()
	for bud.Stats().Waits == 0 { // the second delivery is over the budget: it waits
		select {
		case err := <-got:
			t.Fatalf("a delivery over the budget was handed over (err %v)", err)
		case <-ctx.Done():
			t.Fatal("the second delivery never waited for the budget")
		case <-time.After(time.Millisecond):
		}
	}
	stopWaiting()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if used := bud.Stats().Used; used != 8 {
		t.Fatalf("budget holds %d bytes, want the first delivery's 8", used)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("a closed subscription still holds %d bytes", used)
	}
	sub.Nack(first, 0) // after Close: nothing more to release
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("budget %d after a late nack", used)
	}
}
