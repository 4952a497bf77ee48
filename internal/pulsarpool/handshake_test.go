package pulsarpool

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/tcptest"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// stalledBroker accepts connections and never completes a handshake on them: it reads
// what comes and answers nothing (frozen), or closes each connection at once (a broker
// restarting, a proxy resetting).
func stalledBroker(t *testing.T, closeAtOnce bool) string {
	t.Helper()
	return "pulsar://" + tcptest.Serve(t, func(_ *tcptest.Server, c net.Conn) {
		if closeAtOnce {
			c.Close()
			return
		}
		_, _ = io.Copy(io.Discard, c)
	}).Addr()
}

// TestABrokerThatDoesNotFinishTheHandshakeIsUnavailable: a broker that accepts the
// connection but never answers CONNECT (frozen), or closes it before answering, is
// unavailable for now: a record gets ingress.ErrUnavailable (503, resend it) and a
// stream egress.ErrUnavailable (503, Retry-After). Every handshake failure was taken
// for the broker's refusal (ErrHandshake): the record was refused for good (502, which
// a client skips and never resends) and the GET answered 502.
func TestABrokerThatDoesNotFinishTheHandshakeIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		closeAtOnce bool
	}{{"frozen", false}, {"closing", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := stalledBroker(t, tc.closeAtOnce)
			// A short deadline: the frozen broker never answers, so every operation
			// ends on it.
			c := newClientTimeout(t, url, 2*time.Second)
			p, _ := newPool(t, c, Options{})
			if _, err := publish(t, p, "persistent://public/default/t", "r"); !errors.Is(err, ingress.ErrUnavailable) || errors.Is(err, ingress.ErrRefused) {
				t.Errorf("publish: %v; want ingress.ErrUnavailable", err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			s := NewSubscriber(c, nil)
			if sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{"persistent://public/default/t"}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10}); !errors.Is(err, egress.ErrUnavailable) {
				if sub != nil {
					sub.Close()
				}
				t.Errorf("subscribe: %v; want egress.ErrUnavailable", err)
			}
		})
	}
}

// TestAHandshakeRefusedWithAuthenticationErrorIsUnavailable: a broker refusing the
// credentials (AuthenticationError answering CONNECT) may accept them a moment later,
// so a record whose producer it refused gets ingress.ErrUnavailable (503, resend it)
// and a stream whose consumer it refused egress.ErrUnavailable. Both were refused for
// good (502): the record was skipped by a resuming client although nothing stored it.
func TestAHandshakeRefusedWithAuthenticationErrorIsUnavailable(t *testing.T) {
	b, err := pulsartest.NewBroker(pulsartest.WithAuthenticator(func(string, []byte) error {
		return errors.New("could not fetch the issuer's JWKS")
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	c := newClientTimeout(t, b.URL(), 500*time.Millisecond)
	p, _ := newPool(t, c, Options{})
	if _, err := publish(t, p, "persistent://public/default/t", "r"); !errors.Is(err, ingress.ErrUnavailable) || errors.Is(err, ingress.ErrRefused) {
		t.Errorf("publish: %v; want ingress.ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s := NewSubscriber(c, nil)
	if sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{"persistent://public/default/t"}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10}); !errors.Is(err, egress.ErrUnavailable) {
		if sub != nil {
			sub.Close()
		}
		t.Errorf("subscribe: %v; want egress.ErrUnavailable", err)
	}
}
