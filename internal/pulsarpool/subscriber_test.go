package pulsarpool

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/telemetry"
)

func TestSubscriberDeliversAcksAndKeepsItsCounters(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(1 << 20)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.DeliverPayloads(topic, []byte("one"), []byte("three"))
	var ds []*egress.Delivery
	for _, want := range []string{"one", "three"} {
		d, err := sub.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Payload) != want || d.Topic != topic || d.ID == "" {
			t.Fatalf("delivery %+v, want %q on %s", d, want, topic)
		}
		ds = append(ds, d)
	}
	// The deliveries hold their 8 bytes; the consumer's queue and its permits in flight
	// the rest of what the budget counts (nothing counted twice).
	if q, r, d := s.Memory(); d != 8 || bud.Stats().Used != q+r+d {
		t.Fatalf("budget holds %d bytes: %d queued, %d reserved, %d delivered; want 8 delivered", bud.Stats().Used, q, r, d)
	}
	for _, d := range ds {
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	if q, r, d := s.Memory(); d != 0 || bud.Stats().Used != q+r {
		t.Fatalf("budget holds %d bytes after the acks: %d queued, %d reserved, %d delivered", bud.Stats().Used, q, r, d)
	}
	var st telemetry.PulsarStats
	s.AddStats(&st)
	if st.PermitsGranted == 0 {
		t.Fatalf("stats %+v: no permits counted for an open consumer", st)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	var after telemetry.PulsarStats
	s.AddStats(&after)
	if after.PermitsGranted < st.PermitsGranted {
		t.Fatalf("permits went back from %d to %d when the consumer closed", st.PermitsGranted, after.PermitsGranted)
	}
	if len(b.Acks(topic)) == 0 {
		t.Fatal("the broker saw no ACK")
	}
}

func TestSubscriberAgainstAnUnreachableBrokerIsUnavailable(t *testing.T) {
	s := NewSubscriber(newClient(t, unreachable(t)), nil)
	_, err := s.Subscribe(context.Background(), egress.SubscribeOptions{Topics: []string{"persistent://public/default/x"}, Subscription: "s", Type: "exclusive", ReceiverQueue: 10})
	if !errors.Is(err, egress.ErrUnavailable) {
		t.Fatalf("err = %v, want egress.ErrUnavailable", err)
	}
}

// TestSubscriberWaitsForTheBudgetAndReturnsItOnClose: a spent budget pauses
// deliveries while the stream holds one: its consumer grants no permit the budget
// cannot cover, so the next message stays on the broker; settling the delivery lets it
// come; what a closing subscription still held goes back.
func TestSubscriberWaitsForTheBudgetAndReturnsItOnClose(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(10)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub-budget"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "shared", ReceiverQueue: 10})
	if err != nil {
		t.Fatal(err)
	}
	b.DeliverPayloads(topic, []byte("eight..."), []byte("eight..."), []byte("eight..."))
	first, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The second message is 8 bytes over a 10-byte budget that holds 8: not granted.
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	d, err := sub.Receive(short)
	stop()
	if err == nil {
		t.Fatalf("%s was delivered beyond a spent budget while the first delivery was held (budget %+v)", d.ID, bud.Stats())
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if q, r, d := s.Memory(); d != 8 || bud.Stats().Used != q+r+d || q != 0 {
		t.Fatalf("budget holds %d bytes: %d queued, %d reserved, %d delivered; want the first delivery's 8", bud.Stats().Used, q, r, d)
	}
	sub.Nack(first, time.Hour) // settled: the next message may come, beyond the budget
	second, err := sub.Receive(ctx)
	if err != nil {
		t.Fatalf("nothing delivered once the only delivery was settled: %v", err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("a closed subscription still holds %d bytes", used)
	}
	sub.Nack(second, 0) // after Close: nothing more to release
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("budget %d after a late nack", used)
	}
}

// settledQueue waits until the fake broker used every permit the consumer granted (none
// is left on the broker's side nor reserved on the consumer's), or the queue holds all
// n, so the queue and the budget stay put until the next take.
func settledQueue(t *testing.T, b interface{ Permits(string) (int, int) }, topic string, s *Subscriber, n int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		_, avail := b.Permits(topic)
		s.mu.Lock()
		buffered := 0
		for sub := range s.open {
			buffered += sub.c.Buffered()
		}
		s.mu.Unlock()
		_, reserved, _ := s.Memory() // 0: no permit granted and not yet used
		if buffered > 0 && ((avail == 0 && reserved == 0) || buffered >= n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer's queue never settled (%d queued, %d permits unused)", buffered, avail)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSubscriberQueuesAreInTheBudget: the consumers' queues are charged to the budget
// (the consumer stops granting permits the budget cannot cover), each stream's queue is
// bounded by receiverQueueBytes, a delivery takes over its message's charge rather than
// adding to it, and everything goes back when the subscription closes.
func TestSubscriberQueuesAreInTheBudget(t *testing.T) {
	const size = 8 << 10
	payloads := func(n int) [][]byte {
		var out [][]byte
		for i := range n {
			p := make([]byte, size)
			p[0] = byte(i)
			out = append(out, p)
		}
		return out
	}
	t.Run("budget", func(t *testing.T) {
		const limit = 64 << 10
		b := fakeBroker(t)
		bud := budget.New(limit)
		s := NewSubscriber(newClient(t, b.URL()), bud)
		const topic = "persistent://public/default/sub-queue-budget"
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
			ReceiverQueue: 1000, ReceiverQueueBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		b.DeliverPayloads(topic, payloads(40)...)
		settledQueue(t, b, topic, s, 40)
		q, r, d := s.Memory()
		used := bud.Stats().Used
		if q < limit/2 || used > limit+size || used != q+r+d {
			t.Fatalf("a stopped stream: budget %d bytes (limit %d): %d queued, %d reserved, %d delivered; want the queue charged, within the limit and one message",
				used, limit, q, r, d)
		}
		// Taken from the queue as egress does while it has messages at hand: the charge
		// passes from the queue to the delivery, the budget's total does not move.
		dl, ok := sub.TryReceive()
		if !ok {
			t.Fatal("nothing at hand in a queue that held messages")
		}
		held := []*egress.Delivery{dl}
		q, r, d = s.Memory()
		if after := bud.Stats().Used; d != size || after != q+r+d || after != used {
			t.Fatalf("a delivery taken: budget %d bytes (before %d): %d queued, %d reserved, %d delivered; want %d delivered, nothing counted twice",
				after, used, q, r, d, size)
		}
		// The queue spends the budget and the stream holds what it takes: it still takes
		// every queued message (charged already: the total does not move), and while it
		// holds them nothing more comes beyond the budget.
		peak := used
		for {
			dl, ok := sub.TryReceive()
			if !ok {
				break
			}
			held = append(held, dl)
			peak = max(peak, bud.Stats().Used)
		}
		settledQueue0(t, b, topic, s)
		if st := bud.Stats(); st.Used > limit+size || peak > limit+size {
			t.Fatalf("holding %d deliveries: budget %d bytes, peak %d (limit %d): beyond the limit by more than one message",
				len(held), st.Used, peak, limit)
		}
		if len(held) < limit/size-1 {
			t.Fatalf("took %d of the queued messages while holding them, want every one queued (about %d)", len(held), limit/size)
		}
		for _, dl := range held {
			_ = sub.Ack(dl)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if st := bud.Stats(); st.Used != 0 {
			t.Fatalf("%d bytes still charged after the subscription closed (peak %d)", st.Used, st.Peak)
		}
	})
	t.Run("receiverQueueBytes", func(t *testing.T) {
		const bound = 32 << 10
		b := fakeBroker(t)
		bud := budget.New(1 << 30)
		s := NewSubscriber(newClient(t, b.URL()), bud)
		const topic = "persistent://public/default/sub-queue-bytes"
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
			ReceiverQueue: 1000, ReceiverQueueBytes: bound})
		if err != nil {
			t.Fatal(err)
		}
		b.DeliverPayloads(topic, payloads(40)...)
		maxHeld := 0
		for i := range 40 {
			settledQueue(t, b, topic, s, 40-i)
			held := sub.(*subscription).c.Stats().HeldBytes
			maxHeld = max(maxHeld, held)
			if held > bound+size {
				t.Fatalf("before delivery %d the queue holds %d bytes, receiverQueueBytes %d", i, held, bound)
			}
			dl, err := sub.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if dl.Payload[0] != byte(i) {
				t.Fatalf("delivery %d out of order (%d)", i, dl.Payload[0])
			}
			if err := sub.Ack(dl); err != nil {
				t.Fatal(err)
			}
		}
		if maxHeld < bound/2 {
			t.Fatalf("the queue never held more than %d bytes: the bound %d was not exercised", maxHeld, bound)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if st := bud.Stats(); st.Used != 0 {
			t.Fatalf("%d bytes still charged after the subscription closed", st.Used)
		}
	})
}

// TestSubscriberGrowsNothingBeyondASpentBudgetWhileItHoldsDeliveries: with the budget
// spent by others and a delivery unsettled, the stream still takes what its consumer
// has queued (those bytes are charged already), but no permit goes beyond the budget
// for more: a stream that holds what it takes cannot pile messages up past the budget
// one at a time. Once it holds nothing, one message comes again (a budget spent
// elsewhere cannot stall it for good).
func TestSubscriberGrowsNothingBeyondASpentBudgetWhileItHoldsDeliveries(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(64 << 10)
	s := NewSubscriber(newClient(t, b.URL()), bud)
	const topic = "persistent://public/default/sub-spent"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
		ReceiverQueue: 1000, ReceiverQueueBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 8<<10)
	b.DeliverPayloads(topic, p, p, p)
	first, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	settledQueue(t, b, topic, s, 2)
	bud.Charge(64 << 10) // ingress spends the rest
	held := []*egress.Delivery{first}
	for range 2 {
		d, ok := sub.TryReceive()
		if !ok {
			t.Fatalf("a queued message (charged already) was not taken while a delivery is unsettled (budget %+v)", bud.Stats())
		}
		held = append(held, d)
	}
	// Permits granted while the budget had room are on the broker: what they bring
	// comes, and nothing more.
	granted, avail := b.Permits(topic)
	more := make([][]byte, avail+2)
	for i := range more {
		more[i] = p
	}
	b.DeliverPayloads(topic, more...)
	for i := range avail {
		d, err := sub.Receive(ctx)
		if err != nil {
			t.Fatalf("message %d of the %d permits granted within the budget: %v", i, avail, err)
		}
		held = append(held, d)
	}
	used := bud.Stats().Used
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	d, err := sub.Receive(short)
	stop()
	if err == nil {
		t.Fatalf("%s came beyond a spent budget while %d deliveries are unsettled (budget %+v)", d.ID, len(held), bud.Stats())
	}
	if g, _ := b.Permits(topic); g != granted || bud.Stats().Used != used {
		t.Fatalf("while holding: permits granted %d -> %d, budget %d -> %d; want neither to grow", granted, g, used, bud.Stats().Used)
	}
	last := held[len(held)-1]
	for _, d := range held[:len(held)-1] {
		if err := sub.Ack(d); err != nil {
			t.Fatal(err)
		}
	}
	if g, _ := b.Permits(topic); g != granted {
		t.Fatalf("one delivery still unsettled, yet %d permits went beyond the spent budget", g-granted)
	}
	if err := sub.Ack(last); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatalf("nothing taken once the stream held nothing: %v", err)
	}
	bud.Release(64 << 10)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after Close", used)
	}
}

// settledQueue0 waits until the consumer's queue is empty and no permit it granted is
// unused on the broker nor reserved: nothing more can arrive until it grants again.
func settledQueue0(t *testing.T, b interface{ Permits(string) (int, int) }, topic string, s *Subscriber) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		_, avail := b.Permits(topic)
		s.mu.Lock()
		buffered := 0
		for sub := range s.open {
			buffered += sub.c.Buffered()
		}
		s.mu.Unlock()
		if _, reserved, _ := s.Memory(); buffered == 0 && avail == 0 && reserved == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer never settled empty (%d queued, %d permits unused)", buffered, avail)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestSubscriberDeadLettersWhileItsQueueSpendsTheBudget: the stream's own consumer queue
// spends the budget (it is the consumer's MemoryLimiter) and the stream holds the
// message it dead-letters. The dead letter is a copy of bytes already charged and
// released at the ack right after it: waiting for room there waited on a budget only
// this stream could free, so the publication timed out and the message never left.
func TestSubscriberDeadLettersWhileItsQueueSpendsTheBudget(t *testing.T) {
	const limit, size = 64 << 10, 8 << 10
	b := fakeBroker(t)
	bud := budget.New(limit)
	c := newClient(t, b.URL())
	pool, _ := newPool(t, c, Options{Budget: bud})
	s := NewSubscriber(c, bud)
	s.DeadLetters(pool)
	const topic, dlq = "persistent://public/default/sub-dlq-spent", "persistent://public/default/sub-dlq-spent-DLQ"
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	sub, err := s.Subscribe(ctx, egress.SubscribeOptions{Topics: []string{topic}, Subscription: "s", Type: "exclusive",
		ReceiverQueue: 1000, ReceiverQueueBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var ps [][]byte
	for i := range 40 {
		p := make([]byte, size)
		p[0] = byte(i)
		ps = append(ps, p)
	}
	b.DeliverPayloads(topic, ps...)
	d, err := sub.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	settledQueue(t, b, topic, s, 39)
	if used := bud.Stats().Used; limit-used >= size {
		t.Fatalf("precondition: the queue left %d of %d bytes free, want less than one message (%d)", limit-used, limit, size)
	}
	if err := sub.(egress.DeadLetterer).DeadLetter(ctx, d, dlq); err != nil {
		t.Fatalf("dead-lettering a held message under a budget its own queue spends: %v", err)
	}
	if got := len(b.Messages(dlq)); got != 1 {
		t.Fatalf("%d messages on the dead-letter topic, want 1", got)
	}
	if err := sub.Ack(d); err != nil {
		t.Fatal(err)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if used := bud.Stats().Used; used != 0 {
		t.Fatalf("%d bytes charged after Close", used)
	}
}
