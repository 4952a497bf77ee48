package pulsar_test

import (
	"context"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestACumulativeAckForgetsTheBatchTrackersItCovers: on an Exclusive or Failover
// subscription (egress acknowledges through=N cumulatively there) a cumulative
// acknowledgement settles every batch before it, but their trackers stay: one per batch
// entry ever consumed, until the connection is lost, without bound.
func TestACumulativeAckForgetsTheBatchTrackersItCovers(t *testing.T) {
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Exclusive, BatchIndexAck: true,
		AckGroupTime: 5 * time.Millisecond})
	const batches = 20
	for e := range batches {
		b.Deliver(faultTopic, batchAt(uint64(e+1), 0, nil, "a", "b"))
	}
	ms := receiveN(t, cons, 2*batches)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cons.AckCumulative(ctx, ms[len(ms)-1]); err != nil {
		t.Fatal(err)
	}
	if n := cons.Stats().BatchTrackers; n != 0 {
		t.Fatalf("%d batch trackers kept after a cumulative acknowledgement of all %d batches", n, batches)
	}
}
