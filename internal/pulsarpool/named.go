package pulsarpool

import (
	"fmt"
	"sync"

	"github.com/recordio-bridge/bridge/ingress"
)

// ClaimStream implements ingress.NamedPublisher: one request at a time publishes a
// named stream; the next may start as soon as release is called.
func (ps *Pool) ClaimStream(producer string) (func(), error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.closed {
		return nil, errShuttingDown
	}
	if _, held := ps.claims[producer]; held {
		return nil, fmt.Errorf("%w: another request is publishing %s", ingress.ErrStreamBusy, producer)
	}
	c := &claim{}
	ps.claims[producer] = c
	return sync.OnceFunc(func() {
		ps.mu.Lock()
		if ps.claims[producer] == c {
			delete(ps.claims, producer)
			ps.retireNamedLocked(producer)
		}
		ps.mu.Unlock()
	}), nil
}

// retireNamedLocked closes the producers of a named stream whose request ended, instead
// of keeping them for IdleTimeout: the broker holds a producer name for the connection
// that registered it, so another bridge process taking the stream over would be refused
// (ProducerBusy) for as long as they stay open. The next request of the stream, here
// or there, registers them again. A failed creation of the stream is forgotten too: a
// request's records stop on a topic at its first temporary failure, so the backoff
// protects nothing within a request, and kept for the next one it would refuse that
// request at once, for up to CreateRetryMax, though the cause is gone (ProducerBusy
// while another bridge process's request of the stream was still open, most often).
func (ps *Pool) retireNamedLocked(producer string) {
	for key, e := range ps.m {
		switch {
		case e.name != producer:
		case e.p != nil:
			ps.o.hook("released", e.topic)
			ps.retireLocked(e)
		case e.err != nil:
			delete(ps.m, key)
		}
	}
}

// claimErrLocked says why a named stream's record may not be published on topic: the
// stream is not claimed, or an earlier record failed there temporarily.
func (ps *Pool) claimErrLocked(topic, producer string) error {
	c := ps.claims[producer]
	if c == nil {
		return fmt.Errorf("%w: the named stream %s is not claimed", ingress.ErrUnavailable, producer)
	}
	if err := c.dead[topic]; err != nil {
		return fmt.Errorf("%w: not sent, since an earlier record of the stream failed on %s (resend from that one): %w",
			ingress.ErrUnavailable, topic, err)
	}
	return nil
}

// stopNamed is stopNamedAt for m (a no-op for an unnamed record).
func (ps *Pool) stopNamed(m *ingress.Message, err error) error {
	if m.Producer == "" {
		return err
	}
	return ps.stopNamedAt(m.Producer, m.Topic, err)
}

// stopNamedAt records a temporary failure of a named stream's record on topic: the
// claim's later records for that topic fail without being sent, so none is persisted
// before the failed one is resent (deduplication would then drop the resent one). A
// permanent refusal stops nothing: that record is skipped, never resent. It returns err.
func (ps *Pool) stopNamedAt(producer, topic string, err error) error {
	if !temporary(err) {
		return err
	}
	ps.mu.Lock()
	if c := ps.claims[producer]; c != nil {
		if c.dead == nil {
			c.dead = map[string]error{}
		}
		if c.dead[topic] == nil {
			c.dead[topic] = err
		}
	}
	ps.mu.Unlock()
	return err
}
