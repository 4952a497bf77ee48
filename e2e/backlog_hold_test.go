package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestBacklogQuotaHoldKeepsMessagesPending (issue 14 item 3, producer_request_hold, on
// the real broker): once the backlog is over quota the broker refuses the producer's
// registration (after a topic unload); a message sent meanwhile neither fails nor fails
// the producer: it waits, pending, and is persisted by the SAME producer once the
// backlog is cleared.
func TestBacklogQuotaHoldKeepsMessagesPending(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "hold")
	b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+ns+"/backlogQuota?backlogQuotaType=destination_storage",
		[]byte(`{"limitSize":1024,"limitTime":-1,"policy":"producer_request_hold"}`))
	topic := "persistent://" + ns + "/" + broker.Name("hold")
	c := newOurClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true, SendTimeout: 3 * time.Minute,
		Backoff: pulsar.Backoff{Initial: 100 * time.Millisecond, Max: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	publishers := func() int {
		var st struct {
			Publishers []json.RawMessage `json:"publishers"`
		}
		if err := json.Unmarshal(b.MustAdmin(t, http.MethodGet, adminTopicPath(topic)+"/stats", nil), &st); err != nil {
			t.Fatal(err)
		}
		return len(st.Publishers)
	}
	payload := bytes.Repeat([]byte("b"), 2048)
	// Fill the backlog (nobody acknowledges), unloading the topic after each message,
	// until a message stays pending while the broker lists no publisher: the producer
	// is held out by the quota.
	var held chan error
	for held == nil {
		done := make(chan error, 1)
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: payload}, func(_ pulsar.MessageID, err error) { done <- err })
		for held == nil {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("a send under producer_request_hold failed: %v; want it held", err)
				}
			case <-time.After(2 * time.Second):
				if publishers() == 0 && p.Stats().PendingMessages > 0 {
					held = done
				}
				continue
			case <-ctx.Done():
				t.Fatal("the broker never held the producer out for its backlog quota")
			}
			b.MustAdmin(t, http.MethodPut, adminTopicPath(topic)+"/unload", nil)
			break
		}
	}
	t.Logf("held: %+v", p.Stats())
	// Clear the backlog: the held message is persisted, and the producer goes on.
	b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/subscription/slow/skip_all", nil)
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the held message failed once the backlog cleared: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the held message was not persisted after the backlog cleared")
	}
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("after the backlog cleared")}); err != nil {
		t.Fatalf("the producer after the backlog cleared: %v", err)
	}
}
