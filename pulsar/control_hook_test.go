package pulsar_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// pulsartest's Control sees every command before the broker handles it and decides
// its fate: refused producer registrations are retried by the client, a connection
// cut at a SEND is resent on the next one, and commands it passes are served.
func TestPulsartestControlRefusesDisconnectsAndPasses(t *testing.T) {
	b := fakeBroker(t)
	const topic = "persistent://public/default/controlled"
	var mu sync.Mutex
	seen := map[pulsartest.CommandType]int{}
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		mu.Lock()
		defer mu.Unlock()
		seen[c.Cmd.GetType()]++
		switch {
		case c.Cmd.GetType() == pulsartest.CommandProducer && seen[pulsartest.CommandProducer] == 1:
			return pulsartest.Refuse(pulsartest.ErrServiceNotReady, "not yet")
		case c.Cmd.GetType() == pulsartest.CommandSend && seen[pulsartest.CommandSend] == 1:
			if string(c.Payload) != "one" {
				t.Errorf("the first SEND carried %q", c.Payload)
			}
			return pulsartest.Disconnect()
		}
		return pulsartest.Pass()
	})
	c := client(t, b.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := producer(t, c, pulsar.ProducerOptions{Topic: topic, DisableBatching: true})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("one")}); err != nil {
		t.Fatal(err)
	}
	msgs := b.Messages(topic)
	if len(msgs) != 1 || string(msgs[0].Payload) != "one" {
		t.Fatalf("stored %+v, want the one message once", msgs)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[pulsartest.CommandProducer] < 3 { // refused, then again after the disconnect
		t.Fatalf("PRODUCER seen %d times, want the refusal, the retry and the re-registration", seen[pulsartest.CommandProducer])
	}
	if seen[pulsartest.CommandSend] != 2 {
		t.Fatalf("SEND seen %d times, want the cut one and its resend", seen[pulsartest.CommandSend])
	}
	if len(b.ConnectCredentials()) < 2 {
		t.Fatalf("%d connections, want a new one after the disconnect", len(b.ConnectCredentials()))
	}
}

// A Control that ignores a command leaves it unanswered, as a broker that stopped
// answering does; the client's operation timeout ends the wait.
func TestPulsartestControlIgnoreLeavesACommandUnanswered(t *testing.T) {
	b := fakeBroker(t)
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandProducer {
			return pulsartest.Ignore()
		}
		return pulsartest.Pass()
	})
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.OperationTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "persistent://public/default/ignored"}); err == nil {
		p.Close()
		t.Fatal("a producer was created although its PRODUCER command was never answered")
	}
	b.SetControl(nil)
	p := producer(t, c, pulsar.ProducerOptions{Topic: "persistent://public/default/ignored"})
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("x")}); err != nil {
		t.Fatalf("after SetControl(nil): %v", err)
	}
}
