package pulsar_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestRefusalsInAStretchedWindowAreReadBeforeResending: records sent one by one fill the
// window stretched to four times BatchingMaxInFlight (32 lone entries with the default
// 8); two of them, the first and the seventeenth, are refused as corrupt. The producer
// reads all 31 answers behind the first refusal (the second refusal among them) before
// it resets the connection and resends: every message is stored once, reported with the
// id it was stored under, or (deduplication, the refused ones resent after later ones
// were stored) fails with ErrCorruptInTransit and is not stored.
func TestRefusalsInAStretchedWindowAreReadBeforeResending(t *testing.T) {
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("deduplication=%v", dedup), func(t *testing.T) {
			b := fakeBroker(t)
			b.SetDeduplication(dedup)
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxDelay: time.Hour})
			b.HoldReceipts(true)
			const n = 32
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("m-%05d", i)
			}
			b.CorruptNextSends(1)
			first := sendEach(t, p, names[:n/2]...)
			waitStored(t, b, n/2-1)
			b.CorruptNextSends(1)
			second := sendEach(t, p, names[n/2:]...)
			waitStored(t, b, n-2) // all 32 written: the window stretched to 32 lone entries
			b.HoldReceipts(false)
			results := append(first(20*time.Second), second(20*time.Second)...)
			stored := map[string]int{}
			for _, m := range b.Messages(faultTopic) {
				stored[string(m.Payload)]++
			}
			for i, r := range results {
				refused := i == 0 || i == n/2
				switch {
				case r.err != nil && (!dedup || !refused || !errors.Is(r.err, pulsar.ErrCorruptInTransit)):
					t.Fatalf("%s failed: %v", names[i], r.err)
				case r.err != nil && stored[names[i]] != 0:
					t.Fatalf("%s failed with %v but is stored", names[i], r.err)
				case r.err == nil && stored[names[i]] != 1:
					t.Fatalf("%s was reported sent (id %v) but is stored %d times", names[i], r.id, stored[names[i]])
				case r.err == nil && r.id.Duplicate():
					t.Fatalf("%s reported with the duplicate id %v, not the one it was stored under", names[i], r.id)
				}
			}
			if dedup && (results[0].err == nil || results[n/2].err == nil) {
				t.Fatalf("the refused entries were reported sent (%v, %v), though later ones were stored before their resends", results[0].err, results[n/2].err)
			}
		})
	}
}
