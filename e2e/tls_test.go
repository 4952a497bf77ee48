package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestOurProducerOverTLSToTheRealBroker publishes over pulsar+ssl:// with the broker's
// certificate verified against the test CA (host name included); the official client
// reads the messages over plain TCP. A client that expects another host name is refused.
func TestOurProducerOverTLSToTheRealBroker(t *testing.T) {
	b := broker.Get(t)
	needTLS(t, b)
	topic := b.Topic(t, "tls")
	cons := officialSubscribe(t, newOfficialClient(t, b), topic)
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.TLSURL, TLSCAFile: b.TLSCAFile, OperationTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, m := range []string{"over", "tls"} {
		if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"over", "tls"} {
		msg, err := cons.Receive(ctx)
		if err != nil || string(msg.Payload()) != want {
			t.Fatalf("got %q, %v; want %q", msg.Payload(), err, want)
		}
		cons.Ack(msg)
	}

	wrong, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.TLSURL, TLSCAFile: b.TLSCAFile, TLSServerName: "broker.example.com", OperationTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer wrong.Close()
	if _, err := wrong.CreateProducer(ctx, pulsar.ProducerOptions{Topic: topic}); err == nil || !strings.Contains(err.Error(), "broker.example.com") {
		t.Fatalf("a certificate for 127.0.0.1 was accepted for broker.example.com: %v", err)
	}
}

// needTLS skips a test the broker cannot serve over TLS, or fails it when the run must
// test TLS (BRIDGE_E2E_REQUIRE_TLS set, as `make test` and `make e2e` do): there a
// missing TLS listener is a broken setup, not a reason to pass.
func needTLS(t *testing.T, b *broker.Broker) {
	t.Helper()
	if b.TLSURL != "" {
		return
	}
	msg := "this broker has no TLS listener (PULSAR_TLS_URL unset; pulsar.sh makes one when openssl is installed)"
	if os.Getenv("BRIDGE_E2E_REQUIRE_TLS") != "" {
		t.Fatal(msg + "; BRIDGE_E2E_REQUIRE_TLS is set, so TLS must be tested")
	}
	t.Skip(msg)
}
