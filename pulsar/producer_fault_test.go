package pulsar_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

func fakeBroker(t *testing.T) *pulsartest.Broker {
	t.Helper()
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func client(t *testing.T, url string, opts ...func(*pulsar.ClientOptions)) *pulsar.Client {
	t.Helper()
	o := pulsar.ClientOptions{URL: url, OperationTimeout: 5 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	c, err := pulsar.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func producer(t *testing.T, c *pulsar.Client, opts pulsar.ProducerOptions) *pulsar.Producer {
	t.Helper()
	if opts.Topic == "" {
		opts.Topic = "persistent://public/default/fault"
	}
	if opts.Backoff.Initial == 0 {
		opts.Backoff = pulsar.Backoff{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond}
	}
	p, err := c.CreateProducer(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// sendAll queues n messages "m-00000".. and returns a function that waits for every
// callback and returns the errors by message index.
func sendAll(t *testing.T, p *pulsar.Producer, n int) func() map[int]error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[int]error{}
	wg.Add(n)
	for i := range n {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i))}, func(_ pulsar.MessageID, err error) {
			mu.Lock()
			if err != nil {
				errs[i] = err
			}
			mu.Unlock()
			wg.Done()
		})
	}
	return func() map[int]error {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("callbacks did not all run within 30 s")
		}
		return errs
	}
}

// exactlyOnceInOrder checks the fake broker holds m-00000..m-<n-1> once each, in order.
func exactlyOnceInOrder(t *testing.T, b *pulsartest.Broker, topic string, n int) {
	t.Helper()
	msgs := b.Messages(topic)
	if len(msgs) != n {
		t.Fatalf("broker holds %d messages, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		if want := fmt.Sprintf("m-%05d", i); string(m.Payload) != want {
			t.Fatalf("message %d is %q, want %q", i, m.Payload, want)
		}
	}
}

func TestProducerResendsPendingAfterConnectionDrop(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxMessages: 10})
	b.HoldReceipts(true)
	wait := sendAll(t, p, 200)
	time.Sleep(50 * time.Millisecond) // let the frames reach the broker, which persists them
	b.DropConnections()               // receipts lost with the connection
	b.HoldReceipts(false)
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("sends failed: %v", errs)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 200)
	if s := p.Stats(); s.Reconnects == 0 || s.Resent == 0 {
		t.Fatalf("stats %+v: expected a reconnect that resent", s)
	}
	if b.Frames(pb.BaseCommand_PRODUCER) < 2 {
		t.Fatal("the producer was not re-registered")
	}
}

func TestProducerRecreatedAfterBrokerClosesIt(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	b.HoldReceipts(true)
	wait := sendAll(t, p, 50)
	time.Sleep(30 * time.Millisecond)
	b.CloseProducers() // a topic unload: the TCP connection stays
	b.HoldReceipts(false)
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("sends failed: %v", errs)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 50)
	if b.Frames(pb.BaseCommand_CONNECT) != 1 {
		t.Fatalf("%d CONNECTs: CLOSE_PRODUCER must not cost the connection", b.Frames(pb.BaseCommand_CONNECT))
	}
}

func TestProducerSurvivesRepeatedDrops(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxMessages: 5})
	b.DropAfterFrames(40) // every connection dies after 40 frames
	wait := sendAll(t, p, 1000)
	go func() {
		time.Sleep(300 * time.Millisecond)
		b.DropAfterFrames(0)
	}()
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("%d sends failed, first: %v", len(errs), errs)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 1000)
}

func TestSendTimeoutHonouredWhileReconnecting(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: 300 * time.Millisecond})
	b.Close() // the broker is gone for good: reconnects keep failing
	start := time.Now()
	_, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")})
	if !errors.Is(err, pulsar.ErrSendTimeout) {
		t.Fatalf("err = %v, want ErrSendTimeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("send timeout of 300ms took %s while reconnecting", d)
	}
}

// Messages batched behind one in flight when the connection drops sit in the open batch,
// not in the pending queue; they must time out too (found by the ingress e2e test: they
// waited for the broker forever).
func TestSendTimeoutCoversMessagesBatchedWhileReconnecting(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: 300 * time.Millisecond, BatchingMaxDelay: 50 * time.Millisecond})
	b.HoldReceipts(true)
	errs := make(chan error, 11)
	for i := range 11 {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%d", i))}, func(_ pulsar.MessageID, err error) { errs <- err })
	}
	b.Close()
	deadline := time.After(5 * time.Second)
	for i := range 11 {
		select {
		case err := <-errs:
			if !errors.Is(err, pulsar.ErrSendTimeout) {
				t.Fatalf("message %d: err = %v, want ErrSendTimeout", i, err)
			}
		case <-deadline:
			t.Fatalf("only %d of 11 messages settled 5s after a 300ms send timeout", i)
		}
	}
}

func TestKeepAliveDetectsSilentBroker(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.KeepAlive = 50 * time.Millisecond })
	p := producer(t, c, pulsar.ProducerOptions{})
	b.SetIgnorePings(true)
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Reconnects == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a broker that ignores pings was never declared dead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.SetIgnorePings(false)
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
}

func TestSendErrorTopicTerminatedFailsTheProducer(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	b.FailNextSends(int32(pb.ServerError_TopicTerminatedError))
	_, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("x")})
	var se *pulsar.ServerError
	if !errors.Is(err, pulsar.ErrProducerFailed) || !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_TopicTerminatedError) {
		t.Fatalf("err = %v", err)
	}
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("y")}); !errors.Is(err, pulsar.ErrProducerFailed) {
		t.Fatalf("a failed producer accepted another message: %v", err)
	}
}

func TestSendErrorRetryableIsResent(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	b.FailNextSends(int32(pb.ServerError_PersistenceError))
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatalf("a retryable SEND_ERROR must reconnect and resend: %v", err)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 1)
}

func TestFullQueueBlocksInsteadOfDropping(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{MaxPendingMessages: 5, DisableBatching: true})
	b.HoldReceipts(true)
	wait := sendAll(t, p, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("sixth")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("sixth send with a full queue: %v, want it to block until its context ended", err)
	}
	b.HoldReceipts(false)
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("queued sends failed: %v", errs)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 5)
}

func TestCallbacksMayCallBackIntoTheProducer(t *testing.T) {
	// A callback that sends again must not deadlock (it runs off the connection's reader).
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	done := make(chan error, 1)
	p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}, func(_ pulsar.MessageID, err error) {
		if err != nil {
			done <- err
			return
		}
		_, err = p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00001")})
		done <- err
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("deadlock: a send from a callback never completed")
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 2)
}

func TestChunkedOnFakeBrokerKeepsChunksTogether(t *testing.T) {
	b := fakeBroker(t)
	b.SetMaxMessageSize(16 << 10)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	big := make([]byte, 100<<10)
	wait := sendAll(t, p, 3)
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: big}); err != nil {
		t.Fatal(err)
	}
	if errs := wait(); len(errs) > 0 {
		t.Fatal(errs)
	}
	var chunks []int
	for _, m := range b.Messages("persistent://public/default/fault") {
		if m.Chunk >= 0 {
			chunks = append(chunks, m.Chunk)
		}
	}
	if len(chunks) < 7 {
		t.Fatalf("chunks %v: a 100 KiB message under a 16 KiB limit needs at least 7", chunks)
	}
	for i, c := range chunks {
		if c != i {
			t.Fatalf("chunk ids %v are not consecutive", chunks)
		}
	}
	if _, err := producer(t, client(t, b.URL()), pulsar.ProducerOptions{DisableChunking: true, Topic: "other"}).
		Send(context.Background(), &pulsar.ProducerMessage{Payload: big}); !errors.Is(err, pulsar.ErrMessageTooLarge) {
		t.Fatalf("with chunking off: %v, want ErrMessageTooLarge", err)
	}
}

func TestReceiptAheadOfTheQueueHeadResends(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	b.SkipReceipts(1) // the first batch is persisted but never answered
	wait := sendAll(t, p, 20)
	if errs := wait(); len(errs) > 0 {
		t.Fatalf("sends failed: %v", errs)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 20)
	if p.Stats().Reconnects == 0 {
		t.Fatal("a receipt ahead of the oldest pending message must close the connection and resend")
	}
}

func TestTopicMigratedRecreatesTheProducer(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatal(err)
	}
	b.MigrateProducers(b.URL())
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00001")}); err != nil {
		t.Fatal(err)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 2)
	if b.Frames(pb.BaseCommand_PRODUCER) != 2 || b.Frames(pb.BaseCommand_LOOKUP) < 2 {
		t.Fatalf("PRODUCER %d, LOOKUP %d: the migrated producer must be looked up and registered again",
			b.Frames(pb.BaseCommand_PRODUCER), b.Frames(pb.BaseCommand_LOOKUP))
	}
}

func TestSlowReceiptsTimeOutAndLateOnesAreIgnored(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: 100 * time.Millisecond})
	b.SetReceiptDelay(400 * time.Millisecond)
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("slow")}); !errors.Is(err, pulsar.ErrSendTimeout) {
		t.Fatalf("err = %v, want ErrSendTimeout", err)
	}
	b.SetReceiptDelay(0)
	id, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("fast")})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // the late receipt arrives and must change nothing
	if id.EntryID != 2 {
		t.Fatalf("the second message's id %v is not its own receipt's", id)
	}
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatalf("a late receipt broke the producer: %v", err)
	}
}

// A frame the broker refuses as corrupt (ChecksumError) is resent. The broker may already
// have stored later frames of the same producer that were in flight behind it; with
// deduplication on it then answers the resent one as a duplicate although it never stored
// it. Whatever the interleaving, no message may be reported sent and be missing: each send
// either succeeded and is stored once, in order, or failed with ErrCorruptInTransit.
func TestCorruptedSendIsResentAfterChecksumError(t *testing.T) {
	for _, tc := range []struct {
		dedup  bool
		window int // BatchingMaxInFlight; 0 for the default
	}{{false, 0}, {true, 0}, {false, 1}, {true, 1}} {
		dedup := tc.dedup
		t.Run(fmt.Sprintf("deduplication=%v/window=%d", dedup, tc.window), func(t *testing.T) {
			b := fakeBroker(t)
			b.SetDeduplication(dedup)
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: tc.window})
			b.CorruptNextSends(2)
			wait := sendAll(t, p, 30)
			errs := wait()
			for i, err := range errs {
				if !dedup || !errors.Is(err, pulsar.ErrCorruptInTransit) || !pulsar.IsRetryable(err) {
					t.Fatalf("send %d failed: %v", i, err)
				}
			}
			stored := map[string]int{}
			var order []string
			for _, m := range b.Messages("persistent://public/default/fault") {
				stored[string(m.Payload)]++
				order = append(order, string(m.Payload))
			}
			last := ""
			for i := range 30 {
				name := fmt.Sprintf("m-%05d", i)
				_, failed := errs[i]
				switch {
				case failed && stored[name] != 0:
					t.Fatalf("%s failed with %v but is stored", name, errs[i])
				case !failed && stored[name] == 0:
					t.Fatalf("%s was reported sent but the broker does not hold it (stored: %v)", name, order)
				case dedup && stored[name] > 1:
					t.Fatalf("%s stored %d times with deduplication on", name, stored[name])
				}
			}
			if dedup {
				for _, name := range order {
					if name < last {
						t.Fatalf("stored out of order: %v", order)
					}
					last = name
				}
			}
			if p.Stats().Resent == 0 {
				t.Fatal("the refused frames were never resent")
			}
		})
	}
}

func TestLoneMessageLeavesAtOnceAndBatchesFormWhileInFlight(t *testing.T) {
	b := fakeBroker(t)
	// A delay far longer than the test: if a lone message waited for it, Send would
	// run out of its 5 s context. A window of one entry in flight, so the second
	// message finds it full (TestMessagesLeaveAtOnceWhileTheBrokerKeepsUp has wider ones).
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxDelay: time.Hour, BatchingMaxInFlight: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.Send(ctx, &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatalf("a lone message did not leave at once: %v", err)
	}
	sends := b.Frames(pb.BaseCommand_SEND)

	// With the first message in flight (receipts held), the window is full: the next ten wait in one batch,
	// which leaves as soon as the first receipt arrives.
	b.HoldReceipts(true)
	var wg sync.WaitGroup
	wg.Add(11)
	for i := 1; i <= 11; i++ {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i))}, func(_ pulsar.MessageID, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	for deadline := time.Now().Add(5 * time.Second); b.Frames(pb.BaseCommand_SEND) == sends && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a wrongly unbatched frame to show up
	if got := b.Frames(pb.BaseCommand_SEND) - sends; got != 1 {
		t.Fatalf("%d SEND frames while the first was in flight, want 1 (the rest batched)", got)
	}
	b.HoldReceipts(false)
	wg.Wait()
	if got := b.Frames(pb.BaseCommand_SEND) - sends; got != 2 {
		t.Fatalf("%d SEND frames for 11 messages, want 2: one lone message, then one batch of 10", got)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 12)
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

// What a batch takes from the pending limit is what it gives back: after batched sends
// with keys and properties (whose encoding is larger than the payloads) complete, nothing
// is pending. A batch that released its encoded size drove the count below zero, and the
// per-producer byte bound stopped bounding.
func TestBatchesReleaseWhatTheyAcquired(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxMessages: 50})
	var wg sync.WaitGroup
	wg.Add(200)
	for i := range 200 {
		m := &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i)), Key: fmt.Sprintf("key-%d", i%7),
			Properties: map[string]string{"a-long-property-name": "and-a-long-property-value"}}
		p.SendAsync(context.Background(), m, func(_ pulsar.MessageID, err error) {
			if err != nil {
				t.Errorf("send %d: %v", i, err)
			}
			wg.Done()
		})
	}
	wg.Wait()
	if s := p.Stats(); s.PendingBytes != 0 || s.PendingMessages != 0 {
		t.Fatalf("after every receipt: %d bytes and %d messages pending, want 0 and 0", s.PendingBytes, s.PendingMessages)
	}
}

// With Deduplication the sequence ids are the caller's: a message refused as corrupt after
// a later one was stored can never be stored under its own id, so its error must not be
// retryable (a caller resending it would get a "duplicate" for a message never stored).
func TestCorruptedSendWithCallerSequenceIDsIsNotRetryable(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Name: "named", Deduplication: true})
	b.CorruptNextSends(2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := map[int]error{}
	wg.Add(30)
	for i := range 30 {
		seq := int64(i)
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i)), SequenceID: &seq},
			func(_ pulsar.MessageID, err error) {
				if err != nil {
					mu.Lock()
					errs[i] = err
					mu.Unlock()
				}
				wg.Done()
			})
	}
	wg.Wait()
	stored := map[string]bool{}
	for _, m := range b.Messages("persistent://public/default/fault") {
		stored[string(m.Payload)] = true
	}
	for i := range 30 {
		name := fmt.Sprintf("m-%05d", i)
		err, failed := errs[i]
		switch {
		case failed && (!errors.Is(err, pulsar.ErrCorruptInTransit) || !errors.Is(err, pulsar.ErrSequenceUsed) || pulsar.IsRetryable(err)):
			t.Fatalf("%s: %v; want ErrCorruptInTransit and ErrSequenceUsed, not retryable", name, err)
		case failed && stored[name]:
			t.Fatalf("%s failed but is stored", name)
		case !failed && !stored[name]:
			t.Fatalf("%s was reported sent but is not stored", name)
		}
	}
	if len(errs) == 0 {
		t.Log("no refused message was overtaken this run")
	}
}

// TestASendTimeoutFailsEverythingQueuedBehindIt: when the oldest pending message times
// out, every message behind it fails with it, as the Java client's send timeout fails
// the whole pending queue and the open batch. Kept, they would be resent after the
// reconnection and stored before their callers' resends of the ones that failed, out of
// the order the callers gave (seen in the fault suite: a frozen broker's records out of
// order in their key). The producer goes on with what is sent after.
func TestASendTimeoutFailsEverythingQueuedBehindIt(t *testing.T) {
	b := fakeBroker(t)
	const timeout = time.Second
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: timeout, DisableBatching: true})
	b.StopReading() // a frozen broker: nothing sent on this connection is answered
	type result struct {
		err     error
		settled time.Time
	}
	send := func(payload string) (time.Time, chan result) {
		ch := make(chan result, 1)
		sent := time.Now()
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, func(_ pulsar.MessageID, err error) {
			ch <- result{err, time.Now()}
		})
		return sent, ch
	}
	_, first := send("first")
	time.Sleep(timeout * 7 / 10)
	sentBehind, behind := send("behind")
	for name, ch := range map[string]chan result{"first": first, "behind": behind} {
		select {
		case r := <-ch:
			if !errors.Is(r.err, pulsar.ErrSendTimeout) {
				t.Fatalf("%s: err = %v, want ErrSendTimeout", name, r.err)
			}
			if name == "behind" {
				if waited := r.settled.Sub(sentBehind); waited >= timeout {
					t.Fatalf("the message behind the one that timed out failed %s after it was sent, by its own send timeout: it was kept (and would have been resent) after the first failed", waited.Round(time.Millisecond))
				}
			}
		case <-time.After(10 * timeout):
			t.Fatalf("%s: not settled %s after its send timeout", name, 10*timeout)
		}
	}
	// The producer goes on: after the frozen connection is dropped, a new message is
	// stored, and nothing of the failed ones was stored before it.
	b.DropConnections()
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
		t.Fatal(err)
	}
	msgs := b.Messages("persistent://public/default/fault")
	if len(msgs) == 0 || string(msgs[0].Payload) != "after" {
		var got []string
		for _, m := range msgs {
			got = append(got, string(m.Payload))
		}
		t.Fatalf("stored %q, want the message sent after the timeout first", got)
	}
}
