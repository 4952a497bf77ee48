package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// pulsartest is usable from a module other than the client's: everything its API
// names can be named here (this module cannot import the client's internal packages),
// including injected refusals and the command hook.
func TestPulsartestIsUsableFromAnotherModule(t *testing.T) {
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const topic = "persistent://public/default/from-another-module"
	b.RefuseNext(pulsartest.CommandProducer, pulsartest.ErrTooManyRequests)
	var mu sync.Mutex
	var sequences []uint64
	registrations := 0
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		mu.Lock()
		defer mu.Unlock()
		switch c.Cmd.GetType() {
		case pulsartest.CommandSend:
			sequences = append(sequences, c.Cmd.GetSend().GetSequenceId())
		case pulsartest.CommandProducer:
			registrations++
		}
		return pulsartest.Pass()
	})
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL(), OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic, DisableBatching: true,
		Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, s := range []string{"a", "b"} {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(s)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.Refusals(pulsartest.CommandProducer); n != 0 {
		t.Fatalf("%d injected refusals of PRODUCER left unused, want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if registrations != 1 { // the refused one never reaches the hook: RefuseNext answers first
		t.Fatalf("PRODUCER seen %d times by the hook, want the retry after the refusal only", registrations)
	}
	if len(sequences) != 2 || sequences[0] != 0 || sequences[1] != 1 {
		t.Fatalf("SEND sequence ids seen by the hook: %v, want [0 1]", sequences)
	}
	if got := len(b.Messages(topic)); got != 2 {
		t.Fatalf("stored %d messages, want 2", got)
	}
}
