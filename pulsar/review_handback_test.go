package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestASecondHandBackInFlightDoesNotRedeliverHeldBatchMates: on a Shared subscription a
// batch-mate is nacked while the entry handed back for an earlier nack is on its way
// back (dispatched again, not yet read). The broker then redelivers the entry twice; the
// first arrival clears the hand-back, so the second delivers every outstanding index,
// the held batch-mates included, on the same consumer, with no nack of theirs.
func TestASecondHandBackInFlightDoesNotRedeliverHeldBatchMates(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, BatchIndexAck: true,
		AckGroupTime: 5 * time.Millisecond})
	b.Deliver(faultTopic, batchAt(1, 0, nil, "a", "b", "held1", "held2"))
	ms := receiveN(t, cons, 4)
	cons.NackAfter(ms[0], 0)
	awaitRedelivers(t, b, 1)
	cons.NackAfter(ms[1], 0) // the entry is on its way back: the broker dispatched it again
	awaitRedelivers(t, b, 2)
	// The broker had dispatched the entry again when the second request came: it sends it twice.
	b.Deliver(faultTopic, batchAt(1, 1, nil, "a", "b", "held1", "held2"), batchAt(1, 2, nil, "a", "b", "held1", "held2"), single("next"))
	var got []string
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Payload()))
		if string(m.Payload()) == "next" {
			break
		}
	}
	for _, p := range got {
		if p == "held1" || p == "held2" {
			t.Fatalf("delivered again %q: a batch-mate the application holds and never nacked", got)
		}
	}
}
