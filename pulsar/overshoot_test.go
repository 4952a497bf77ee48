package pulsar_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestReceiverQueueBytesSizeJump: a backlog of batches of small messages followed by
// much larger ones, a consumer with a byte window and a MemoryLimiter, and a reader that
// stops taking. The permits granted while the small ones arrived must not multiply the
// window by the jump in size: the bytes queued plus those reserved for the permits in
// flight stay within the bound the client documents (ConsumerOptions.ReceiverQueueBytes),
// and every message still comes, in order, when the reader resumes.
//
// Up to the per-permit floor (8 KiB: the attacker's case, ~110 B then 8 KB) the window
// holds, but for one entry; above it, each permit in flight may bring the excess of the
// new size over the floor (at most window/floor permits are in flight).
func TestReceiverQueueBytesSizeJump(t *testing.T) {
	const (
		window = 1 << 20
		floor  = 8 << 10
		small  = 110
		perBat = 100
		bats   = 5
	)
	for _, large := range []int{8 << 10, 32 << 10} {
		t.Run(fmt.Sprintf("large=%d", large), func(t *testing.T) {
			const nLarge = 1000 // more than the broker may send against the window in messages
			batchBytes := perBat * small
			// The bound: the window, one entry beyond it (a batch brings whole when one
			// permit is left; a single message is one entry), and for messages above the
			// floor, their excess over it for every permit that may be in flight.
			limit := window + max(batchBytes, large) + window/floor*max(0, large-floor)
			bud := budget.New(128 << 20)
			b := fakeBroker(t)
			cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{
				ReceiverQueueSize: 1000, ReceiverQueueBytes: window, MemoryLimiter: bud})
			var out []pulsartest.Outgoing
			var want []string
			for i := range bats {
				var ps []string
				for j := range perBat {
					p := fmt.Sprintf("s%03d-%02d", i, j) + strings.Repeat("s", small-7)
					ps = append(ps, p)
					want = append(want, p)
				}
				out = append(out, batchOf(ps...))
			}
			for i := range nLarge {
				p := fmt.Sprintf("L%06d", i) + strings.Repeat("L", large-7)
				out = append(out, single(p))
				want = append(want, p)
			}
			b.Deliver(faultTopic, out...)

			check := func(when string) int {
				t.Helper()
				st := cons.Stats()
				used := int(bud.Stats().Used)
				if st.HeldBytes+st.ReservedBytes > limit || used > limit {
					t.Fatalf("%s: %d bytes queued (%d messages) + %d reserved for permits in flight, budget used %d: above the bound %d (window %d)",
						when, st.HeldBytes, cons.Buffered(), st.ReservedBytes, used, limit, window)
				}
				return st.HeldBytes + st.ReservedBytes
			}
			// quiet: every message the broker sent (the permits it used, batches counted
			// whole) is in the queue or taken, and it has no permit left or nothing left to
			// send: what is queued and reserved no longer changes until the reader takes one.
			quiet := func(taken int) func() bool {
				return func() bool {
					granted, avail := b.Permits(faultTopic)
					sent := granted - avail
					return (avail <= 0 || sent >= len(want)) && taken+cons.Buffered() == sent
				}
			}
			// The reader stops.
			waitFor(t, "the queue to fill", quiet(0))
			peak := check("the reader stopped")
			// The reader resumes, slowly: the bound holds before every take, and every
			// message comes in order.
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			for i, w := range want {
				if i%50 == 0 {
					waitFor(t, fmt.Sprintf("the queue before message %d", i), quiet(i))
					peak = max(peak, check(fmt.Sprintf("before message %d", i)))
				}
				m, err := cons.Receive(ctx)
				if err != nil {
					t.Fatalf("after %d of %d messages: %v", i, len(want), err)
				}
				if got := string(m.Payload()); got != w {
					t.Fatalf("message %d: got %.9q…, want %.9q…", i, got, w)
				}
				if err := cons.Ack(m); err != nil {
					t.Fatal(err)
				}
			}
			nothingMore(t, cons)
			cons.Close()
			if used := bud.Stats().Used; used != 0 {
				t.Fatalf("%d bytes still charged after Close", used)
			}
			t.Logf("peak queued+reserved %d bytes, bound %d, window %d, budget peak %d", peak, limit, window, bud.Stats().Peak)
		})
	}
}
