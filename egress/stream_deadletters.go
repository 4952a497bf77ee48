package egress

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/recordio-bridge/bridge/mapping"
)

// asidesFor is the dead-letter queue of a stream of def, nil when it has no dead-letter topic.
func asidesFor(def *mapping.Stream) chan *Delivery {
	if !def.DeadLetters() {
		return nil
	}
	return make(chan *Delivery, maxQueuedDeadLetters)
}

// deadLetterTimeout bounds publishing one message to a dead-letter topic (a variable
// for tests).
var deadLetterTimeout = 30 * time.Second

// deadLetter publishes d to the stream's dead-letter topic and then acknowledges it. It
// reports false, leaving d to the caller (unacknowledged), when the publication failed.
func (st *stream) deadLetter(ctx context.Context, d *Delivery) bool {
	o, _ := st.srv.obs.(RetryObserver)
	dl, ok := st.sub.(DeadLetterer)
	if !ok {
		st.srv.log.Error("retry.maxDeliveries reached, but the subscription cannot dead-letter", "stream", st.def.Name, "message", d.ID)
		return false
	}
	topic := st.deadLetterTopic(d)
	ctx, cancel := context.WithTimeout(ctx, deadLetterTimeout)
	defer cancel()
	if err := dl.DeadLetter(ctx, d, topic); err != nil {
		st.srv.log.Warn("dead-lettering failed: the message stays unacknowledged and comes again", "stream", st.def.Name,
			"message", d.ID, "deadLetterTopic", topic, "error", err.Error())
		if o != nil {
			o.DeadLettered(st.def.Name, false)
		}
		return false
	}
	if err := st.sub.Ack(d); err != nil {
		// Dead-lettered but not acknowledged: it comes again and is dead-lettered again
		// (a duplicate on the dead-letter topic, never a loss).
		st.srv.log.Warn("acknowledging a dead-lettered message failed", "stream", st.def.Name, "message", d.ID, "error", err.Error())
	}
	st.srv.log.Info("message dead-lettered", "stream", st.def.Name, "message", d.ID, "deliveries", d.Redeliveries+1, "deadLetterTopic", topic)
	if o != nil {
		o.DeadLettered(st.def.Name, true)
	}
	return true
}

// maxQueuedDeadLetters bounds the messages a stream holds for its dead-letter goroutine;
// beyond, a message goes back for redelivery after its backoff instead of waiting.
const maxQueuedDeadLetters = 64

// aside hands d to the stream's dead-letter goroutine without waiting; when its queue is
// full d goes back for redelivery after its backoff, and comes again.
func (st *stream) aside(d *Delivery) {
	if st.def.Type == "exclusive" || st.def.Type == "failover" {
		// Where acks may be cumulative: none may cover d until it is dead-lettered (or
		// comes back), as for a nacked message (see retry).
		st.mu.Lock()
		st.retrying[d.ID] = d.Topic
		st.mu.Unlock()
	}
	select {
	case st.asides <- d:
	default:
		st.nackAside(d)
	}
}

// deadLetters publishes what the stream sets aside, one message at a time, so that
// neither the delivery loop nor the ack-timeout sweep ever waits on a dead-letter topic.
// When a publication fails, what is queued behind it goes back for redelivery after its
// backoff without being tried: a dead-letter topic that is down or frozen costs a
// message at most one deadLetterTimeout of waiting, not one for each message ahead of it.
// Once done is closed (nothing more is queued then) it settles what is left the same way
// and returns.
func (st *stream) deadLetters(ctx context.Context, done <-chan struct{}) {
	for {
		var d *Delivery
		select {
		case d = <-st.asides:
		case <-done:
			select {
			case d = <-st.asides:
			default:
				return
			}
		}
		if st.setAside(ctx, d) {
			continue
		}
		for more := true; more; {
			select {
			case d := <-st.asides:
				st.nackAside(d)
			default:
				more = false
			}
		}
	}
}

// setAside dead-letters d (a message delivered retry.maxDeliveries times, or one its
// consumer could not decode, as stored), then acknowledges it; it reports false when
// the publication failed and d went back for redelivery after its backoff. d is never
// acknowledged unpublished.
func (st *stream) setAside(ctx context.Context, d *Delivery) bool {
	if !st.deadLetter(ctx, d) {
		st.nackAside(d)
		return false
	}
	st.mu.Lock()
	delete(st.retrying, d.ID) // acknowledged: it will not come back to be forgotten
	if d.Undecodable != nil {
		delete(st.setAsideFails, d.ID)
	}
	st.mu.Unlock()
	return true
}

// nackAside nacks d, which could not be dead-lettered now, with the backoff of its
// deliveries so far; an undecodable message also counts its failed dead-letterings,
// since the broker counts no redeliveries on exclusive and failover subscriptions.
func (st *stream) nackAside(d *Delivery) {
	n := d.Redeliveries
	if d.Undecodable != nil {
		st.mu.Lock()
		fails := st.setAsideFails[d.ID]
		switch {
		case st.setAsideFails == nil:
			st.setAsideFails = map[string]uint32{d.ID: 1}
		case fails > 0 || len(st.setAsideFails) < maxSetAsideFails:
			st.setAsideFails[d.ID] = fails + 1
		}
		st.mu.Unlock()
		n = max(n, fails)
	}
	st.sub.Nack(d, st.def.Retry.Delay(n, rand.Float64()))
}

// maxSetAsideFails bounds the ids whose failed dead-letterings a stream counts; beyond,
// a message's backoff is the broker's redelivery count alone.
const maxSetAsideFails = 1024

// deadLetterTopic is retry.deadLetterTopic, or Pulsar's convention
// <topic>-<subscription>-DLQ (the topic without its partition suffix).
func (st *stream) deadLetterTopic(d *Delivery) string {
	if t := st.def.Retry.DeadLetterTopic; t != "" {
		return t
	}
	topic := d.Topic
	if i := strings.LastIndex(topic, "-partition-"); i > 0 {
		if _, err := strconv.Atoi(topic[i+len("-partition-"):]); err == nil {
			topic = topic[:i]
		}
	}
	return topic + "-" + st.opts.subscription + "-DLQ"
}
