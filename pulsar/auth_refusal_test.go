package pulsar_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/logbuf"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// refusingBroker is a fake broker that refuses the next *refuse CONNECTs with
// AuthenticationError (closing their connections, as the broker does), as an OpenID
// broker restarted before it can reach its identity provider's keys would; a negative
// count refuses every CONNECT until it is set again.
func refusingBroker(t *testing.T) (*pulsartest.Broker, *atomic.Int64) {
	t.Helper()
	var refuse atomic.Int64
	b, err := pulsartest.NewBroker(pulsartest.WithAuthenticator(func(string, []byte) error {
		for {
			n := refuse.Load()
			switch {
			case n < 0:
				return errors.New("could not fetch the issuer's JWKS")
			case n == 0:
				return nil
			case refuse.CompareAndSwap(n, n-1):
				return errors.New("could not fetch the issuer's JWKS")
			}
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, &refuse
}

// inFlight sends payload with the broker frozen, so the message is written and neither
// stored nor receipted; the returned channel gets its outcome.
func inFlight(t *testing.T, b *pulsartest.Broker, p *pulsar.Producer, payload string) <-chan error {
	t.Helper()
	b.StopReading()
	res := make(chan error, 1)
	p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, func(_ pulsar.MessageID, err error) { res <- err })
	return res
}

func outcome(t *testing.T, res <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-res:
		return err
	case <-time.After(within):
		t.Fatalf("no outcome within %s", within)
		return nil
	}
}

func stored(b *pulsartest.Broker, topic string) map[string]int {
	n := map[string]int{}
	for _, m := range b.Messages(topic) {
		n[string(m.Payload)]++
	}
	return n
}

// TestProducerWhoseReconnectHandshakeIsRefusedOnceKeepsGoing: the broker answers one
// reconnection's CONNECT with AuthenticationError and accepts the next. The producer
// reconnects with backoff, as the Java client does, and the message that was in flight
// when the connection dropped is resent and stored once. It failed for good with the
// refusal, and the message with it, although the broker never stored it.
func TestProducerWhoseReconnectHandshakeIsRefusedOnceKeepsGoing(t *testing.T) {
	b, refuse := refusingBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: 20 * time.Second})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-0")}); err != nil {
		t.Fatal(err)
	}
	res := inFlight(t, b, p, "m-1")
	refuse.Store(1)
	b.DropConnections()
	if err := outcome(t, res, 10*time.Second); err != nil {
		t.Fatalf("the message in flight across the refused handshake: %v", err)
	}
	if n := refuse.Load(); n != 0 {
		t.Fatalf("%d refusals left unused: the producer never met the refused handshake", n)
	}
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-2")}); err != nil {
		t.Fatalf("after the refused handshake: %v", err)
	}
	if got := stored(b, p.Topic()); got["m-0"] != 1 || got["m-1"] != 1 || got["m-2"] != 1 || len(got) != 3 {
		t.Fatalf("stored %v, want m-0, m-1 and m-2 once each", got)
	}
}

// TestProducerWhoseHandshakeStaysRefusedFailsItsMessagesBySendTimeoutForNow: a broker
// that goes on refusing the credentials keeps the producer reconnecting with backoff,
// but holds nothing past the send timeout: the message in flight fails by then with
// ErrSendTimeout (temporary), and once the broker accepts the credentials again the
// producer publishes.
func TestProducerWhoseHandshakeStaysRefusedFailsItsMessagesBySendTimeoutForNow(t *testing.T) {
	b, refuse := refusingBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: 500 * time.Millisecond})
	res := inFlight(t, b, p, "m-0")
	refuse.Store(-1)
	b.DropConnections()
	start := time.Now()
	err := outcome(t, res, 10*time.Second)
	if !errors.Is(err, pulsar.ErrSendTimeout) || !pulsar.IsRetryable(err) || errors.Is(err, pulsar.ErrProducerFailed) {
		t.Fatalf("the message in flight while the broker refuses the credentials: %v; want a temporary ErrSendTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("failed after %s, with a send timeout of 500ms", d)
	}
	if p.Err() != nil {
		t.Fatalf("the producer stopped: %v", p.Err())
	}
	refuse.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m-1")}); err != nil {
		t.Fatalf("once the broker accepts the credentials again: %v", err)
	}
}

// TestInFlightMessagesOfAProducerRefusedForGoodOnReconnectAreOfUnknownOutcome: when a
// reconnection is refused for good (the role lost its permission on the topic), the
// messages sent on the lost connection may have been stored: they fail with
// ErrOutcomeUnknown (retryable, so a resend tells), never with the refusal itself, which
// a caller takes for "not stored, skip it".
func TestInFlightMessagesOfAProducerRefusedForGoodOnReconnectAreOfUnknownOutcome(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: 20 * time.Second})
	res := inFlight(t, b, p, "m-0")
	b.RefuseNext(pb.BaseCommand_PRODUCER, pb.ServerError_AuthorizationError)
	b.DropConnections()
	err := outcome(t, res, 10*time.Second)
	var se *pulsar.ServerError
	if !errors.Is(err, pulsar.ErrOutcomeUnknown) || !pulsar.IsRetryable(err) || !errors.As(err, &se) || se.Code != pulsar.CodeAuthorization {
		t.Fatalf("the message in flight when the reconnection was refused for good: %v; want ErrOutcomeUnknown wrapping the AuthorizationError", err)
	}
	// The refusal holds for what is sent from now on.
	_, err = p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-1")})
	if !errors.Is(err, pulsar.ErrProducerFailed) || errors.Is(err, pulsar.ErrOutcomeUnknown) || pulsar.IsRetryable(err) {
		t.Fatalf("a message after the refusal: %v; want the producer's permanent failure", err)
	}
}

// TestConsumerWhoseResubscribeHandshakeIsRefusedOnceKeepsReceiving: the broker refuses
// one reconnection's CONNECT with AuthenticationError; the consumer subscribes again on
// the next and receives what comes after. It failed for good (Receive returned
// ErrConsumerFailed).
func TestConsumerWhoseResubscribeHandshakeIsRefusedOnceKeepsReceiving(t *testing.T) {
	b, refuse := refusingBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10})
	b.Deliver(faultTopic, single("a"))
	if got := receiveAll(t, cons, 1); got[0] != "a" {
		t.Fatalf("received %q", got)
	}
	refuse.Store(1)
	b.DropConnections()
	b.Deliver(faultTopic, single("b"))
	if got := receiveAll(t, cons, 1); got[0] != "b" {
		t.Fatalf("received %q after the refused handshake", got)
	}
	if n := refuse.Load(); n != 0 {
		t.Fatalf("%d refusals left unused: the consumer never met the refused handshake", n)
	}
}

// TestCreationRetriesAHandshakeRefusedWithAuthenticationError: a producer or consumer
// created while the broker refuses the credentials for a moment is retried with backoff
// within the operation timeout, as the Java client retries a retriable error until its
// deadline; a refusal that outlasts it is still the handshake's error.
func TestCreationRetriesAHandshakeRefusedWithAuthenticationError(t *testing.T) {
	b, refuse := refusingBroker(t)
	c := client(t, b.URL())
	refuse.Store(2)
	producer(t, c, pulsar.ProducerOptions{})
	refuse.Store(2)
	cons, err := c.Subscribe(context.Background(), pulsar.ConsumerOptions{Topics: []string{faultTopic}, Subscription: "s",
		Backoff: pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}})
	if err != nil {
		t.Fatalf("subscribe after two refused handshakes: %v", err)
	}
	cons.Close()

	refuse.Store(-1)
	short := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.OperationTimeout = 2 * time.Second })
	_, err = short.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "persistent://public/default/other"})
	var se *pulsar.ServerError
	if !errors.Is(err, pulsar.ErrHandshake) || !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_AuthenticationError) || !pulsar.IsRetryable(err) {
		t.Fatalf("a refusal outlasting the operation timeout: %v; want the retryable AuthenticationError", err)
	}
	if rs := short.HandshakeRefusals(); len(rs) != 1 || rs[0].Count == 0 || !errors.Is(rs[0].Err, pulsar.ErrHandshake) {
		t.Fatalf("HandshakeRefusals while refused: %+v", rs)
	}
	refuse.Store(0)
	if err := short.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	if rs := short.HandshakeRefusals(); len(rs) != 0 {
		t.Fatalf("HandshakeRefusals after an accepted handshake: %+v", rs)
	}
}

// TestAHandshakeRefusalSpellIsLoggedOnceWhenItBeginsAndWhenItEnds: refusals met only by
// creations retrying them within their deadline are logged too (an operator sees the
// broker refusing the bridge's credentials in the log, not only in /readyz), once when
// the spell begins and once when a handshake is accepted again, not at every refusal.
func TestAHandshakeRefusalSpellIsLoggedOnceWhenItBeginsAndWhenItEnds(t *testing.T) {
	b, refuse := refusingBroker(t)
	var logs logbuf.Buffer
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	refuse.Store(3)
	producer(t, c, pulsar.ProducerOptions{})
	if n := refuse.Load(); n != 0 {
		t.Fatalf("%d refusals left unused: the creation never met the refused handshake", n)
	}
	out := logs.String()
	if n := strings.Count(out, "the broker refuses the client's handshake"); n != 1 || !strings.Contains(out, "AuthenticationError") {
		t.Fatalf("three refusals in one spell logged %d times (want once, naming AuthenticationError):\n%s", n, out)
	}
	if n := strings.Count(out, "the broker accepts the client's handshake again"); n != 1 || !strings.Contains(out, "refusals=3") {
		t.Fatalf("the end of the spell logged %d times (want once, with refusals=3):\n%s", n, out)
	}
}
