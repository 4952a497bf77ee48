package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestReceiverQueueBytesSizeJumpOnTheBroker: on the real broker, a backlog of batches
// of ~110 B messages followed by 8 KiB ones, read by our consumer with a 1 MiB byte
// window and a MemoryLimiter, and a reader that stops taking. The permits granted while
// the small ones arrived must not let the broker fill the queue with large ones: the
// bytes queued plus those reserved for permits in flight stay within the window and one
// entry (8 KiB is the client's per-permit floor), and every message still comes, in
// order, when the reader resumes.
func TestReceiverQueueBytesSizeJumpOnTheBroker(t *testing.T) {
	const (
		window = 1 << 20
		small  = 110
		perBat = 100
		nSmall = 500
		large  = 8 << 10
		nLarge = 1000
	)
	b := broker.Get(t)
	topic := b.Topic(t, "size-jump")
	theirs := newOfficialClient(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var want []string
	publish := func(opts official.ProducerOptions, n, size int, tag string) {
		opts.Topic = topic
		prod, err := theirs.CreateProducer(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer prod.Close()
		errs := make(chan error, n)
		for i := range n {
			p := fmt.Sprintf("%s%05d", tag, i) + strings.Repeat(tag, size-6)
			want = append(want, p)
			prod.SendAsync(ctx, &official.ProducerMessage{Payload: []byte(p)}, func(_ official.MessageID, _ *official.ProducerMessage, err error) { errs <- err })
		}
		for range n {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(official.ProducerOptions{BatchingMaxMessages: perBat, BatchingMaxPublishDelay: 50 * time.Millisecond}, nSmall, small, "s")
	publish(official.ProducerOptions{DisableBatching: true}, nLarge, large, "L")

	bud := budget.New(128 << 20)
	cons := ourSubscribe(t, newOurClient(t, b), pulsar.ConsumerOptions{Topics: []string{topic}, Subscription: "jump",
		ReceiverQueueSize: 1000, ReceiverQueueBytes: window, MemoryLimiter: bud})
	// quiet: every message the broker dispatched to the subscription is queued or taken,
	// and it has no permit left (or nothing left to send), so the queue no longer changes
	// until the reader takes one.
	quiet := func(taken int) bool {
		s, ok := getTopicStats(t, b, topic).Subscriptions["jump"]
		if !ok || len(s.Consumers) != 1 {
			return false
		}
		sent := int(s.MsgOutCounter)
		return (s.Consumers[0].AvailablePermits <= 0 || sent >= len(want)) && taken+cons.Buffered() == sent
	}
	limit := window + max(perBat*small, large)
	check := func(when string, taken int) int {
		t.Helper()
		for !quiet(taken) {
			if ctx.Err() != nil {
				t.Fatalf("%s: the queue did not settle (%d queued)", when, cons.Buffered())
			}
			time.Sleep(20 * time.Millisecond)
		}
		st := cons.Stats()
		used := int(bud.Stats().Used)
		if st.HeldBytes+st.ReservedBytes > limit || used > limit {
			t.Fatalf("%s: %d bytes queued (%d messages) + %d reserved for permits in flight, budget used %d: above the bound %d (window %d)",
				when, st.HeldBytes, cons.Buffered(), st.ReservedBytes, used, limit, window)
		}
		return st.HeldBytes + st.ReservedBytes
	}
	peak := check("the reader stopped", 0)
	for i, w := range want {
		if i%100 == 0 {
			peak = max(peak, check(fmt.Sprintf("before message %d", i), i))
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, len(want), err)
		}
		if got := string(m.Payload()); got != w {
			t.Fatalf("message %d: got %.6q…, want %.6q…", i, got, w)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	if peak < window/2 {
		t.Fatalf("the queue never held more than %d bytes: the window %d was not exercised", peak, window)
	}
	cons.Close()
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes still charged after Close", used)
	}
	t.Logf("%d messages of %d B in batches of %d, then %d of %d B: peak queued+reserved %d bytes, bound %d (window %d), budget peak %d",
		nSmall, small, perBat, nLarge, large, peak, limit, window, bud.Stats().Peak)
}
