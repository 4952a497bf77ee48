package pulsar

import (
	"fmt"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar/internal/delivery"
)

// TestABatchsMessagesAreOneAllocation: turning a batch into messages allocates its
// messages together, not one each: the allocations are as many for a batch of 100 as
// for a batch of 10 (the two slices, the batch's tracker and its bits).
func TestABatchsMessagesAreOneAllocation(t *testing.T) {
	allocs := func(n int) float64 {
		e := &delivery.Entry{Kind: delivery.Batch, BatchSize: n, Permits: n}
		for i := range n {
			e.Messages = append(e.Messages, delivery.Message{Index: i, Payload: []byte(fmt.Sprint(i))})
		}
		p := &partitionConsumer{trackers: map[entryKey]*batchTracker{}}
		mid := MessageID{LedgerID: 1, EntryID: 2}
		var msgs []*Message
		got := testing.AllocsPerRun(50, func() {
			msgs, _ = p.unbatchLocked(mid, e, nil, Message{Topic: "t"})
			clear(p.trackers)
		})
		if len(msgs) != n || msgs[n-1].ID.BatchIndex != int32(n-1) || string(msgs[n-1].payload) != fmt.Sprint(n-1) || msgs[0] == msgs[1] {
			t.Fatalf("a batch of %d made %d messages, the last %+v", n, len(msgs), msgs[len(msgs)-1])
		}
		return got
	}
	small, large := allocs(10), allocs(100)
	if large > small {
		t.Fatalf("a batch of 100 made %.0f allocations, a batch of 10 %.0f: the messages are allocated one by one", large, small)
	}
	t.Logf("%.0f allocations for a batch of 10 or 100", small)
}
