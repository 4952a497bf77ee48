package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// cutter is a Dialer that remembers the connections it opened, so a test can cut them
// as a flaky network or a restarting proxy would.
type cutter struct {
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	dialed chan struct{} // signalled (without blocking) on every new connection
}

func newCutter() *cutter {
	return &cutter{conns: map[net.Conn]struct{}{}, dialed: make(chan struct{}, 1)}
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.conns[nc] = struct{}{}
	c.mu.Unlock()
	select {
	case c.dialed <- struct{}{}:
	default:
	}
	return nc, nil
}

// cutAll closes every connection opened so far and returns how many were open.
func (c *cutter) cutAll() int {
	c.mu.Lock()
	conns := c.conns
	c.conns = map[net.Conn]struct{}{}
	c.mu.Unlock()
	for nc := range conns {
		nc.Close()
	}
	return len(conns)
}

// TestRegistrationsSurviveConnectionChurn puts 8 producers and 8 consumers on one
// connection and cuts it thousands of times, at random points of the reconnect (while
// dialling, looking up, registering, right after registering, while publishing).
// Afterwards every producer publishes, every consumer receives, and the broker lists all
// 16: none was left believing in a dead connection.
func TestRegistrationsSurviveConnectionChurn(t *testing.T) {
	b := broker.Get(t)
	cut := newCutter()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL, OperationTimeout: 30 * time.Second, Dialer: cut.dial})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	backoff := pulsar.Backoff{Initial: time.Millisecond, Max: 20 * time.Millisecond}
	const n = 8
	topics := make([]string, n)
	producers := make([]*pulsar.Producer, n)
	consumers := make([]*pulsar.Consumer, n)
	for i := range n {
		topics[i] = b.Topic(t, fmt.Sprintf("churn-%d", i))
		cons, err := c.Subscribe(ctx, pulsar.ConsumerOptions{Topics: []string{topics[i]}, Subscription: "churn", Backoff: backoff})
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		consumers[i] = cons
		prod, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topics[i], Backoff: backoff, SendTimeout: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		producers[i] = prod
	}

	// Publish all along, so cuts also land between SENDs and their receipts.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				sctx, scancel := context.WithTimeout(ctx, 50*time.Millisecond)
				_, _ = p.Send(sctx, &pulsar.ProducerMessage{Payload: fmt.Appendf(nil, "churn-%d-%d", i, j)})
				scancel()
			}
		}()
	}

	const cuts = 2000
	done := 0
	for done < cuts {
		select {
		case <-cut.dialed:
		case <-time.After(30 * time.Second):
			t.Fatalf("after %d cuts no new connection was dialled for 30 s: the clients stopped reconnecting", done)
		}
		// Cut at a random point of what follows the dial.
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		done += cut.cutAll()
	}
	close(stop)
	wg.Wait()
	t.Logf("cut %d connections", done)

	// Every producer publishes and every consumer receives what its producer sent now.
	for i := range n {
		marker := fmt.Sprintf("after-churn-%d", i)
		if _, err := producers[i].Send(ctx, &pulsar.ProducerMessage{Payload: []byte(marker)}); err != nil {
			t.Fatalf("producer %d after the churn: %v", i, err)
		}
	}
	for i := range n {
		marker := fmt.Sprintf("after-churn-%d", i)
		for {
			rctx, rcancel := context.WithTimeout(ctx, time.Minute)
			m, err := consumers[i].Receive(rctx)
			rcancel()
			if err != nil {
				t.Fatalf("consumer %d after the churn never received %q: %v (stats %+v)", i, marker, err, consumers[i].Stats())
			}
			_ = consumers[i].Ack(m)
			if string(m.Payload()) == marker {
				break
			}
		}
	}
	// And the broker lists all sixteen on their topics.
	for i, topic := range topics {
		s := getTopicStats(t, b, topic)
		if len(s.Publishers) != 1 {
			t.Errorf("topic %d: the broker lists %d producers, want 1", i, len(s.Publishers))
		}
		if got := len(s.Subscriptions["churn"].Consumers); got != 1 {
			t.Errorf("topic %d: the broker lists %d consumers, want 1", i, got)
		}
	}
}
