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

// waitFor polls cond (a real sync point: the fake broker's permits and the queue) until
// it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// settled: the broker used every permit it was given and none is on its way (with a
// MemoryLimiter, none is reserved: a FLOW the broker has not yet read leaves it no
// permits for a moment), or it has nothing left to send, so the consumer's queue and the
// budget no longer change until the reader takes one.
func settled(b *pulsartest.Broker, cons *pulsar.Consumer, remaining int) func() bool {
	return func() bool {
		_, avail := b.Permits(faultTopic)
		st := cons.Stats()
		return ((avail == 0 && st.ReservedBytes == 0) || cons.Buffered() >= remaining) && cons.Buffered() > 0
	}
}

// TestMemoryLimiterBoundsTheQueue: with a shared MemoryLimiter (the bridge's budget) a
// slow reader's queue is charged to it from arrival until taken, permits are withheld
// when it cannot cover more, every message still arrives in order, and nothing stays
// charged once everything is taken and the consumer closed.
func TestMemoryLimiterBoundsTheQueue(t *testing.T) {
	const (
		limit = 64 << 10
		size  = 16 << 10
		n     = 40
	)
	bud := budget.New(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, MemoryLimiter: bud})
	var out []pulsartest.Outgoing
	var want []string
	for i := range n {
		p := fmt.Sprintf("%04d", i) + strings.Repeat("x", size-4)
		out = append(out, single(p))
		want = append(want, p)
	}
	b.Deliver(faultTopic, out...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	maxUsed := int64(0)
	for i, w := range want {
		waitFor(t, fmt.Sprintf("message %d to arrive", i), settled(b, cons, len(want)-i))
		// The queue and the budget read with no arrival between: messages the broker
		// already sent keep landing after settled, each adding to both, and one landing
		// between the two reads made the queue look under-charged (a flake under load).
		// The queue only grows while nothing is taken, so equal readings around the
		// budget's mean none landed meanwhile.
		var used, held int64
		waitFor(t, fmt.Sprintf("a quiet reading before message %d", i), func() bool {
			before := int64(cons.Stats().HeldBytes)
			used = bud.Stats().Used
			held = int64(cons.Stats().HeldBytes)
			return held == before
		})
		maxUsed = max(maxUsed, used)
		// Uniform messages fit the estimate exactly: never more than the limit, except
		// the one permit an idle partition always gets.
		if used > limit+size {
			t.Fatalf("before message %d the budget counts %d bytes (%d queued), limit %d", i, used, cons.Buffered(), limit)
		}
		if used < held {
			t.Fatalf("before message %d the queue holds %d bytes but the budget counts only %d", i, held, used)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, len(want), err)
		}
		if got := string(m.Payload()); got != w {
			t.Fatalf("message %d: got %.8q…, want %.8q…", i, got, w)
		}
		if err := cons.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	nothingMore(t, cons)
	if maxUsed < limit/2 {
		t.Fatalf("the budget never counted more than %d bytes: the test did not exercise the limit %d", maxUsed, limit)
	}
	if granted, _ := b.Permits(faultTopic); granted > n+limit/size+1 {
		t.Fatalf("%d permits granted for %d messages: the limiter did not withhold them", granted, n)
	}
	cons.Close()
	if st := bud.Stats(); st.Used != 0 {
		t.Fatalf("%d bytes still charged after the consumer closed", st.Used)
	}
	t.Logf("max charged %d bytes, limit %d, peak %d", maxUsed, limit, bud.Stats().Peak)
}

// TestMemoryLimiterSpentByOthersStillDelivers: a budget filled by someone else (ingress)
// does not stall a consumer for good: with nothing queued and nothing in flight it gets
// one permit at a time, and the whole budget comes back when the others release theirs.
func TestMemoryLimiterSpentByOthersStillDelivers(t *testing.T) {
	const (
		limit = 64 << 10
		size  = 8 << 10
		n     = 20
	)
	bud := budget.New(limit)
	bud.Charge(limit) // the others hold all of it
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 1 << 20, MemoryLimiter: bud})
	var out []pulsartest.Outgoing
	for i := range n {
		out = append(out, single(fmt.Sprintf("%04d", i)+strings.Repeat("z", size-4)))
	}
	b.Deliver(faultTopic, out...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		waitFor(t, fmt.Sprintf("message %d to arrive", i), settled(b, cons, 1))
		if q := cons.Buffered(); q > 1 {
			t.Fatalf("before message %d: %d messages queued although the budget is spent by others", i, q)
		}
		if used := bud.Stats().Used; used > limit+size {
			t.Fatalf("before message %d the budget counts %d bytes: more than the others' %d and one message", i, used, limit)
		}
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v", i, n, err)
		}
		if !strings.HasPrefix(string(m.Payload()), fmt.Sprintf("%04d", i)) {
			t.Fatalf("message %d out of order: %.4q", i, m.Payload())
		}
		_ = cons.Ack(m)
	}
	bud.Release(limit)
	cons.Close()
	if st := bud.Stats(); st.Used != 0 {
		t.Fatalf("%d bytes still charged after the others released theirs and the consumer closed", st.Used)
	}
}

// TestMemoryLimiterNoLeak: what is queued or in flight when the connection drops, when
// everything is redelivered, or when the consumer closes, is returned to the budget.
func TestMemoryLimiterNoLeak(t *testing.T) {
	const (
		limit = 256 << 10
		size  = 4 << 10
	)
	bud := budget.New(limit)
	b := fakeBroker(t)
	c := client(t, b.URL())
	cons := subscribe(t, c, pulsar.ConsumerOptions{ReceiverQueueSize: 1000, ReceiverQueueBytes: 32 << 10, MemoryLimiter: bud})
	deliver := func(k int) {
		var out []pulsartest.Outgoing
		for i := range k {
			out = append(out, single(fmt.Sprintf("%04d", i)+strings.Repeat("n", size-4)))
		}
		b.Deliver(faultTopic, out...)
	}
	// Filled, then the connection drops: the queue and the reservation go back.
	deliver(40)
	waitFor(t, "the queue to fill", settled(b, cons, 40))
	if used := bud.Stats().Used; used == 0 {
		t.Fatal("nothing charged for a full queue")
	}
	b.DropConnections()
	waitFor(t, "the resubscription", func() bool { return cons.Stats().Reconnects >= 1 })
	waitFor(t, "the queue to refill after the reconnect", settled(b, cons, 40))
	used, held := bud.Stats().Used, int64(cons.Stats().HeldBytes)
	// What is charged now is what is queued plus at most the reservation for the
	// permits in flight: the old registration's queue and reservation are gone.
	if used > held+(32<<10)+size {
		t.Fatalf("after the reconnect %d bytes are charged for a queue of %d bytes", used, held)
	}
	// Everything redelivered: the queue is dropped and its charge goes back.
	cons.RedeliverUnacknowledged()
	waitFor(t, "the queue to refill after the redelivery", settled(b, cons, 40))
	used, held = bud.Stats().Used, int64(cons.Stats().HeldBytes)
	if used > held+(32<<10)+size {
		t.Fatalf("after the redelivery %d bytes are charged for a queue of %d bytes", used, held)
	}
	// Some taken (their charge moves to the application), the rest closed with the queue.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = cons.Ack(m)
	}
	if cons.Buffered() == 0 {
		t.Fatal("nothing left queued: the test does not exercise Close with a queue")
	}
	cons.Close()
	if st := bud.Stats(); st.Used != 0 {
		t.Fatalf("%d bytes still charged after the consumer closed with a queue (peak %d)", st.Used, st.Peak)
	}
}

// TestReceiverQueueBytesWithBatchesNeverStalls: batches larger than the permits left
// (the broker sends whole entries and counts its permits below zero) do not leave the
// byte-bounded window waiting for permits the broker will never use: every message of
// many such batches arrives, with and without a MemoryLimiter, and the window in
// messages is kept.
func TestReceiverQueueBytesWithBatchesNeverStalls(t *testing.T) {
	for _, withLimiter := range []bool{false, true} {
		t.Run(fmt.Sprintf("limiter=%v", withLimiter), func(t *testing.T) {
			// Batches of 100 messages (50 KiB) against a bound of 16 KiB: every grant is
			// smaller than the batch it brings.
			const (
				batches = 40
				per     = 100
				size    = 512
				window  = 200
			)
			bud := budget.New(1 << 30)
			opts := pulsar.ConsumerOptions{ReceiverQueueSize: window, ReceiverQueueBytes: 16 << 10}
			if withLimiter {
				opts.MemoryLimiter = bud
			}
			b := fakeBroker(t)
			cons := subscribe(t, client(t, b.URL()), opts)
			var out []pulsartest.Outgoing
			for i := range batches {
				var ps []string
				for j := range per {
					ps = append(ps, fmt.Sprintf("%03d-%02d", i, j)+strings.Repeat("b", size-6))
				}
				out = append(out, batchOf(ps...))
			}
			b.Deliver(faultTopic, out...)
			got := receiveAll(t, cons, batches*per)
			for i, g := range got {
				if want := fmt.Sprintf("%03d-%02d", i/per, i%per); !strings.HasPrefix(g, want) {
					t.Fatalf("message %d is %.6q, want %s", i, g, want)
				}
			}
			// The window in messages: the broker never had more than the window plus one
			// batch's overshoot granted beyond what was taken.
			if granted, _ := b.Permits(faultTopic); granted > batches*per+window+per {
				t.Fatalf("%d permits granted for %d messages (window %d, batches of %d)", granted, batches*per, window, per)
			}
			cons.Close()
			if used := bud.Stats().Used; used != 0 {
				t.Fatalf("%d bytes still charged after Close", used)
			}
		})
	}
}

// TestKeepMemoryChargeHandsTheChargeOver: with KeepMemoryCharge a taken message keeps
// its charge, the application's to release (Message.MemoryCharge); the permits its take
// frees are granted only as far as the limiter covers them.
func TestKeepMemoryChargeHandsTheChargeOver(t *testing.T) {
	const (
		limit = 32 << 10
		size  = 8 << 10
	)
	bud := budget.New(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 1000, MemoryLimiter: bud, KeepMemoryCharge: true})
	var out []pulsartest.Outgoing
	for i := range 10 {
		out = append(out, single(fmt.Sprintf("%04d", i)+strings.Repeat("k", size-4)))
	}
	b.Deliver(faultTopic, out...)
	waitFor(t, "the queue to fill", settled(b, cons, 10))
	before := bud.Stats().Used
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var taken []*pulsar.Message
	for range 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.MemoryCharge() != int64(size) {
			t.Fatalf("a taken message hands over %d bytes of charge, want %d", m.MemoryCharge(), size)
		}
		taken = append(taken, m)
	}
	// Nothing was released by the takes, so nothing more came: the budget still counts
	// the two taken messages, and no more than the limit and one message in all.
	if used := bud.Stats().Used; used != before || used > limit+size {
		t.Fatalf("after two takes the budget counts %d bytes (before %d, limit %d)", used, before, limit)
	}
	held := bud.Stats().Used
	for _, m := range taken {
		cons.Settled(m)
		cons.Settled(m) // a second settlement releases nothing more
		_ = cons.Ack(m)
	}
	if used := bud.Stats().Used; used < held-2*int64(size) {
		t.Fatalf("settling the two taken messages twice each took the budget from %d to %d bytes, want at most %d released", held, used, 2*size)
	}
	for i := range 8 { // the rest still comes
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("after %d of the other 8: %v", i, err)
		}
		cons.Settled(m)
		_ = cons.Ack(m)
	}
	cons.Close()
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after Close (the taken messages' charges were released by the application)", used)
	}
}

// TestMemoryLimiterCountsAnArrivalBeforeGrantingOnIt: an arrival's bytes are charged
// before its reservation goes back and before the permits it makes room for are granted.
// Granting first reserved from room the arrival itself was about to fill (the queue went
// past the limit with nothing taken), and in between its bytes were counted nowhere (a
// reader of the budget could see room that was not there).
func TestMemoryLimiterCountsAnArrivalBeforeGrantingOnIt(t *testing.T) {
	const limit, size = 10, 8
	bud := budget.New(limit)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud})
	b.Deliver(faultTopic, single("eight..."), single("eight..."))
	// Settled: every permit the broker had is used and none is reserved (so none is on
	// its way), or both messages came.
	waitFor(t, "the queue to settle", func() bool {
		_, avail := b.Permits(faultTopic)
		return cons.Buffered() >= 2 || (cons.Buffered() > 0 && avail == 0 && cons.Stats().ReservedBytes == 0)
	})
	if q, used := cons.Buffered(), bud.Stats().Used; q != 1 || used > limit {
		t.Fatalf("nothing taken: %d messages queued and %d bytes charged, limit %d: want one message, within the limit", q, used, limit)
	}
	cons.Close()
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after Close", used)
	}
}

// TestMemoryLimiterCountsChunksBeingReassembled: the chunks of a message not yet whole
// are held by the consumer, so they are charged to the limiter as they arrive (each
// chunk's permit goes back at once, so without that a message of many chunks filled
// memory outside the budget up to MaxChunkedMessageSize per partition). The charge
// becomes the whole message's when it completes (not counted twice), and goes back when
// an incomplete message is dropped (here: its chunks expire) or the consumer closes.
func TestMemoryLimiterCountsChunksBeingReassembled(t *testing.T) {
	const part = 16 << 10
	data := func(c byte) string { return strings.Repeat(string(c), part) }
	t.Run("completed", func(t *testing.T) {
		bud := budget.New(1 << 20)
		b := fakeBroker(t)
		cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud})
		b.Deliver(faultTopic, chunk("u", 0, 4, data('a'), 4*part), chunk("u", 1, 4, data('b'), 4*part),
			chunk("u", 2, 4, data('c'), 4*part), single("marker"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := cons.Receive(ctx) // the chunks before it were handled on the same connection
		if err != nil || string(m.Payload()) != "marker" {
			t.Fatalf("got %v, %v; want the marker", m, err)
		}
		if used, st := bud.Stats().Used, cons.Stats(); used-int64(st.ReservedBytes+st.ChargedBytes) < 3*part {
			t.Fatalf("three chunks of %d bytes held for reassembly, the limiter counts %d bytes (%d reserved, %d queued)", part, used, st.ReservedBytes, st.ChargedBytes)
		}
		b.Deliver(faultTopic, chunk("u", 3, 4, data('d'), 4*part))
		if m, err = cons.Receive(ctx); err != nil || m.Size() != 4*part {
			t.Fatalf("got %v, %v; want the whole chunked message", m, err)
		}
		// Taken (the charge goes back at the take): what remains is at most the
		// reservation of the permits in flight, nothing of the message.
		if used, reserved := bud.Stats().Used, int64(cons.Stats().ReservedBytes); used != reserved {
			t.Fatalf("after the chunked message was taken the limiter counts %d bytes, %d of them reserved", used, reserved)
		}
		cons.Close()
		if used := bud.Stats().Used; used != 0 {
			t.Fatalf("%d bytes charged after Close", used)
		}
	})
	t.Run("expired", func(t *testing.T) {
		bud := budget.New(1 << 20)
		b := fakeBroker(t)
		cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud,
			ChunkExpiry: 50 * time.Millisecond, AckGroupTime: 10 * time.Millisecond})
		b.Deliver(faultTopic, chunk("u", 0, 4, data('a'), 4*part), chunk("u", 1, 4, data('b'), 4*part))
		// Dropped on expiry: its chunks are acknowledged then, and the charge is back.
		waitFor(t, "the expired chunks' acknowledgement", func() bool { return len(b.Acks(faultTopic)) > 0 })
		waitFor(t, "the expired chunks' charge to go back", func() bool {
			return bud.Stats().Used == int64(cons.Stats().ReservedBytes)
		})
		cons.Close()
		if used := bud.Stats().Used; used != 0 {
			t.Fatalf("%d bytes charged after Close", used)
		}
	})
	t.Run("closed", func(t *testing.T) {
		bud := budget.New(1 << 20)
		b := fakeBroker(t)
		cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud})
		b.Deliver(faultTopic, chunk("u", 0, 4, data('a'), 4*part), single("marker"))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cons.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		if used, st := bud.Stats().Used, cons.Stats(); used-int64(st.ReservedBytes+st.ChargedBytes) < part {
			t.Fatalf("a chunk of %d bytes held for reassembly, the limiter counts %d bytes (%d reserved, %d queued)", part, used, st.ReservedBytes, st.ChargedBytes)
		}
		cons.Close()
		if used := bud.Stats().Used; used != 0 {
			t.Fatalf("%d bytes charged after Close with a message half reassembled", used)
		}
	})
}

// TestChunkReassemblyStaysInsideTheMemoryBudget: a producer starts many chunked messages,
// interleaved, whose last chunks never come. Each non-final chunk's permit goes back at
// once and the partition holds nothing queued, so it is always granted its next permit
// (beyond the budget, if need be): reassembly took 7.5 MiB of a 1 MiB budget, bounded
// only by MaxPendingChunkedMessages (100) and MaxChunkedMessageSize (256 MiB) per
// partition. The budget now bounds it: a partition reassembling more than one message
// gets permits only as far as the budget covers them, and waits for room; here only its
// own incomplete messages hold it, so they go at ChunkExpiry (their chunks
// acknowledged, counted) and the rest follows. A message reassembled alone is held
// beyond the budget, so it still completes.
func TestChunkReassemblyStaysInsideTheMemoryBudget(t *testing.T) {
	const part, limit = 64 << 10, 1 << 20
	data := strings.Repeat("c", part)
	t.Run("incomplete", func(t *testing.T) {
		bud := budget.New(limit)
		b := fakeBroker(t)
		cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud,
			ChunkExpiry: 300 * time.Millisecond, AckGroupTime: 10 * time.Millisecond})
		const messages = 40
		var out []pulsartest.Outgoing
		for id := range 3 { // of 4: the last chunk never comes
			for u := range messages {
				c := chunk(fmt.Sprint("u", u), id, 4, data, 4*part)
				c.LedgerID, c.EntryID = 7, uint64(id*messages+u)
				out = append(out, c)
			}
		}
		b.Deliver(faultTopic, append(out, single("marker"))...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if m, err := cons.Receive(ctx); err != nil || string(m.Payload()) != "marker" {
			t.Fatalf("got %v, %v; want the marker after the chunks", m, err)
		}
		st := cons.Stats()
		// The budget, plus one message held beyond it (4 chunks at most) and the one
		// permit an idle partition gets beyond it.
		if peak := bud.Stats().Peak; peak > limit+6*part {
			t.Fatalf("reassembly took the budget to %d bytes (limit %d; %d bytes of chunks held now, %d chunks discarded)",
				peak, limit, st.ReassemblyBytes, st.Discarded)
		}
		if st.ChunkedDropped == 0 {
			t.Fatalf("stats %+v: no chunked message was counted as dropped", st)
		}
		// What was dropped is acknowledged, so it leaves no backlog.
		waitFor(t, "the dropped chunks' acknowledgements", func() bool {
			acked := 0
			for _, a := range b.Acks(faultTopic) {
				acked += len(a.IDs)
			}
			return acked >= st.Discarded
		})
		cons.Close()
		if used := bud.Stats().Used; used != 0 {
			t.Fatalf("%d bytes charged after Close", used)
		}
	})
	t.Run("alone beyond a spent budget", func(t *testing.T) {
		bud := budget.New(limit)
		bud.Charge(limit) // spent by others (ingress)
		defer bud.Release(limit)
		b := fakeBroker(t)
		cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud})
		var out []pulsartest.Outgoing
		for id := range 4 {
			out = append(out, chunk("whole", id, 4, data, 4*part))
		}
		b.Deliver(faultTopic, out...)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		m, err := cons.Receive(ctx)
		if err != nil || m.Size() != 4*part {
			t.Fatalf("got %v, %v; want the whole chunked message, held beyond the budget as the only one", m, err)
		}
		if st := cons.Stats(); st.ChunkedDropped != 0 {
			t.Fatalf("stats %+v: a lone chunked message was dropped", st)
		}
	})
}

// TestInterleavedChunkedMessagesWaitForTheBudgetInsteadOfBeingDropped: two producers send
// chunked messages to one partition at once, so their chunks interleave, while the
// process-wide budget is spent by others (ingress waiting for receipts, other streams'
// queues: an ordinary moment of a busy bridge). The first chunk of the second message
// found the budget spent and made the partition drop the first message and acknowledge
// its chunks: a legitimate message, whole on the broker, was lost to the subscription
// for good. The partition now waits for room instead (no permit beyond the budget
// while it reassembles more than one message), and both messages come whole once the
// others release what they hold.
func TestInterleavedChunkedMessagesWaitForTheBudgetInsteadOfBeingDropped(t *testing.T) {
	const part, limit = 64 << 10, 1 << 20
	data := strings.Repeat("c", part)
	bud := budget.New(limit)
	bud.Charge(limit) // spent by others for now
	released := false
	defer func() {
		if !released {
			bud.Release(limit)
		}
	}()
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, MemoryLimiter: bud})
	var out []pulsartest.Outgoing
	for id := range 4 {
		for _, u := range []string{"a", "b"} {
			out = append(out, chunk(u, id, 4, data, 4*part))
		}
	}
	b.Deliver(faultTopic, out...)
	waitFor(t, "both messages' first chunks, or a message dropped", func() bool {
		st := cons.Stats()
		return st.ReassemblyBytes >= 2*part || st.ChunkedDropped > 0
	})
	if st := cons.Stats(); st.ChunkedDropped != 0 {
		t.Fatalf("stats %+v: a chunked message was dropped (and its chunks acknowledged) because the budget was spent for a moment", st)
	}
	bud.Release(limit) // the others are done
	released = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%v; stats %+v", err, cons.Stats())
		}
		if m.Size() != 4*part {
			t.Fatalf("a message of %d bytes, want %d", m.Size(), 4*part)
		}
		cons.Ack(m)
	}
	if st := cons.Stats(); st.ChunkedDropped != 0 || st.Discarded != 0 {
		t.Fatalf("stats %+v: chunks were dropped", st)
	}
}

// TestInterleavedChunksLargerThanTheQueueBoundComplete: chunks larger than
// ReceiverQueueBytes (the broker's 5 MiB chunks against the bridge's 1 MiB default) of
// two interleaved messages, with a budget that has room: the partition's queue bound
// alone must not make it wait (only the budget may), or it waits for ChunkExpiry and
// then drops the first message.
func TestInterleavedChunksLargerThanTheQueueBoundComplete(t *testing.T) {
	const part = 64 << 10
	data := strings.Repeat("c", part)
	bud := budget.New(64 << 20)
	b := fakeBroker(t)
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{ReceiverQueueSize: 10, ReceiverQueueBytes: part / 4,
		MemoryLimiter: bud, ChunkExpiry: time.Hour})
	var out []pulsartest.Outgoing
	for id := range 4 {
		for _, u := range []string{"a", "b"} {
			out = append(out, chunk(u, id, 4, data, 4*part))
		}
	}
	b.Deliver(faultTopic, out...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 2 {
		m, err := cons.Receive(ctx)
		if err != nil {
			t.Fatalf("%v; stats %+v", err, cons.Stats())
		}
		if m.Size() != 4*part {
			t.Fatalf("a message of %d bytes, want %d", m.Size(), 4*part)
		}
		cons.Ack(m)
	}
	if st := cons.Stats(); st.ChunkedDropped != 0 {
		t.Fatalf("stats %+v: a chunked message was dropped", st)
	}
}
