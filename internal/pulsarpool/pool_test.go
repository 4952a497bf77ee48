package pulsarpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/budget"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestMain poisons every frame buffer given back for reuse, so that any test reading a
// payload after its frame was released reads the poison instead of its bytes.
func TestMain(m *testing.M) {
	pulsartest.PoisonReleasedFrames(true)
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of these tests: a missing event fails the test instead of
// hanging it.
const wait = 10 * time.Second

func fakeBroker(t *testing.T) *pulsartest.Broker {
	t.Helper()
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// newClient is a client whose lookups and registrations have the tests' generous
// deadline: under the race detector on a loaded machine, a handshake with the in-process
// fake broker took more than 2 s.
func newClient(t *testing.T, url string) *pulsar.Client {
	t.Helper()
	return newClientTimeout(t, url, wait)
}

// newClientTimeout is a client whose operations end after d: for tests whose broker
// never answers, where the deadline expiring is the point.
func newClientTimeout(t *testing.T, url string, d time.Duration) *pulsar.Client {
	t.Helper()
	c, err := pulsar.NewClient(pulsar.ClientOptions{URL: url, OperationTimeout: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// events records what a pool reports through its test hook.
type events struct {
	mu  sync.Mutex
	n   map[string]int
	sig chan struct{}
}

func newEvents() *events { return &events{n: map[string]int{}, sig: make(chan struct{}, 1)} }

func (ev *events) hook(event, topic string) {
	ev.mu.Lock()
	ev.n[event+" "+topic]++
	ev.n[event]++
	ev.mu.Unlock()
	select {
	case ev.sig <- struct{}{}:
	default:
	}
}

func (ev *events) count(key string) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	return ev.n[key]
}

// await waits until key has happened at least n times.
func (ev *events) await(t *testing.T, key string, n int) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for ev.count(key) < n {
		select {
		case <-ev.sig:
		case <-deadline.C:
			t.Fatalf("%q happened %d times, want %d", key, ev.count(key), n)
		}
	}
}

func newPool(t *testing.T, c *pulsar.Client, o Options) (*Pool, *events) {
	t.Helper()
	ev := newEvents()
	o.hook = ev.hook
	if o.CreateTimeout == 0 {
		o.CreateTimeout = 2 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = time.Hour
	}
	if o.Producer.SendTimeout == 0 {
		o.Producer.SendTimeout = 5 * time.Second
	}
	p := New(c, o)
	t.Cleanup(p.Close)
	return p, ev
}

// publish sends one record and waits for its outcome.
func publish(t *testing.T, p *Pool, topic, payload string) (string, error) {
	t.Helper()
	type result struct {
		id  string
		err error
	}
	ch := make(chan result, 1)
	p.PublishAsync(context.Background(), &ingress.Message{Topic: topic, Payload: []byte(payload)}, func(id string, err error) {
		ch <- result{id, err}
	})
	select {
	case r := <-ch:
		return r.id, r.err
	case <-time.After(wait):
		t.Fatalf("no outcome for %q on %s", payload, topic)
		return "", nil
	}
}

func topicName(i int) string { return fmt.Sprintf("persistent://public/default/pool-%d", i) }

func TestPoolSharesOneProducerPerTopic(t *testing.T) {
	b := fakeBroker(t)
	p, ev := newPool(t, newClient(t, b.URL()), Options{})
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := publish(t, p, topicName(i%2), fmt.Sprint("m", i)); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range 2 {
		msgs := b.Messages(topicName(i))
		if len(msgs) != 20 {
			t.Fatalf("%s: %d messages, want 20", topicName(i), len(msgs))
		}
		for _, m := range msgs {
			if m.Producer != msgs[0].Producer {
				t.Fatalf("%s written by %s and %s: concurrent first uses must share one producer", topicName(i), msgs[0].Producer, m.Producer)
			}
		}
	}
	if n := ev.count("create"); n != 2 {
		t.Fatalf("%d creations for 2 topics", n)
	}
	if st := p.Stats(); st.PendingMessages != 0 {
		t.Fatalf("pending %d after every receipt", st.PendingMessages)
	}
}

func TestPoolClosesIdleProducersAndRecreatesThem(t *testing.T) {
	b := fakeBroker(t)
	p, ev := newPool(t, newClient(t, b.URL()), Options{IdleTimeout: 20 * time.Millisecond})
	if _, err := publish(t, p, topicName(0), "a"); err != nil {
		t.Fatal(err)
	}
	ev.await(t, "idle-closed "+topicName(0), 1)
	if n := p.Live(); n != 0 {
		t.Fatalf("%d live producers after the idle close", n)
	}
	if _, err := publish(t, p, topicName(0), "b"); err != nil {
		t.Fatal(err)
	}
	msgs := b.Messages(topicName(0))
	if len(msgs) != 2 || msgs[0].Producer == msgs[1].Producer {
		t.Fatalf("messages %+v: the second must come from a new producer", msgs)
	}
}

func TestPoolDoesNotCloseAProducerInUse(t *testing.T) {
	b := fakeBroker(t)
	p, ev := newPool(t, newClient(t, b.URL()), Options{IdleTimeout: 20 * time.Millisecond})
	b.HoldReceipts(true)
	done := make(chan error, 1)
	p.PublishAsync(context.Background(), &ingress.Message{Topic: topicName(0), Payload: []byte("held")}, func(_ string, err error) { done <- err })
	// The reaper runs several times while the receipt is held; it must leave the producer.
	ev.await(t, "reaped", 5)
	if ev.count("idle-closed") != 0 {
		t.Fatal("a producer with a message in flight was closed as idle")
	}
	b.HoldReceipts(false)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A producer that failed for good (here: its topic was terminated) must leave the pool,
// so later records get a fresh producer instead of the same error until a restart.
func TestPoolEvictsAFailedProducer(t *testing.T) {
	b := fakeBroker(t)
	p, ev := newPool(t, newClient(t, b.URL()), Options{})
	if _, err := publish(t, p, topicName(0), "before"); err != nil {
		t.Fatal(err)
	}
	b.FailNextSends(int32(pulsar.CodeTopicTerminated))
	if _, err := publish(t, p, topicName(0), "refused"); !errors.Is(err, ingress.ErrRefused) || !errors.Is(err, pulsar.ErrProducerFailed) {
		t.Fatalf("err = %v, want a refusal by a failed producer", err)
	}
	if _, err := publish(t, p, topicName(0), "after"); err != nil {
		t.Fatalf("the record after a producer failed: %v (the failed producer stayed in the pool)", err)
	}
	msgs := b.Messages(topicName(0))
	if len(msgs) != 2 || msgs[0].Producer == msgs[1].Producer {
		t.Fatalf("messages %+v: the last must come from a new producer", msgs)
	}
	ev.await(t, "evicted "+topicName(0), 1)
	ev.await(t, "closed "+topicName(0), 1)
}

// unreachable returns a loopback address nothing listens on.
func unreachable(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "pulsar://" + addr
}

// A broker that cannot be reached when a topic's producer is first created is a
// temporary condition: 503 with Retry-After, never "refused by the broker" (502).
func TestPoolCreationAgainstAnUnreachableBrokerIsUnavailable(t *testing.T) {
	p, _ := newPool(t, newClient(t, unreachable(t)), Options{CreateTimeout: 500 * time.Millisecond})
	_, err := publish(t, p, topicName(0), "x")
	if !errors.Is(err, ingress.ErrUnavailable) || errors.Is(err, ingress.ErrRefused) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// A failed creation is remembered for a while: the records that follow get its error at
// once instead of each trying (and waiting for) a creation of its own.
func TestPoolCachesAFailedCreationWithBackoff(t *testing.T) {
	p, ev := newPool(t, newClient(t, unreachable(t)), Options{CreateTimeout: 500 * time.Millisecond,
		CreateRetryMin: time.Hour, CreateRetryMax: time.Hour})
	for i := range 5 {
		if _, err := publish(t, p, topicName(0), fmt.Sprint("r", i)); !errors.Is(err, ingress.ErrUnavailable) {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if n := ev.count("create " + topicName(0)); n != 1 {
		t.Fatalf("%d creation attempts for 5 records within the backoff", n)
	}
}

func TestPoolRetriesACreationAfterItsBackoff(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	p, ev := newPool(t, newClient(t, unreachable(t)), Options{CreateTimeout: 500 * time.Millisecond,
		CreateRetryMin: time.Second, CreateRetryMax: 4 * time.Second, now: clock.now})
	try := func(want int) {
		t.Helper()
		if _, err := publish(t, p, topicName(0), "r"); !errors.Is(err, ingress.ErrUnavailable) {
			t.Fatal(err)
		}
		if n := ev.count("create " + topicName(0)); n != want {
			t.Fatalf("%d creation attempts at %v, want %d", n, clock.now(), want)
		}
	}
	try(1)
	clock.add(999 * time.Millisecond)
	try(1) // within the first second of backoff
	clock.add(2 * time.Millisecond)
	try(2) // after it: a new attempt
	clock.add(1500 * time.Millisecond)
	try(2) // the backoff doubled to two seconds
	clock.add(600 * time.Millisecond)
	try(3)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// The cap on live producers: a new topic at the cap closes the producer used least
// recently that has nothing in flight.
func TestPoolCapsLiveProducers(t *testing.T) {
	b := fakeBroker(t)
	p, ev := newPool(t, newClient(t, b.URL()), Options{MaxProducers: 2})
	for i := range 5 {
		if _, err := publish(t, p, topicName(i), "x"); err != nil {
			t.Fatal(err)
		}
		if n := p.Live(); n > 2 {
			t.Fatalf("%d live producers, cap 2", n)
		}
	}
	ev.await(t, "capped "+topicName(0), 1)
	ev.await(t, "capped "+topicName(2), 1)
	if ev.count("capped "+topicName(4)) != 0 {
		t.Fatal("the newest producer was closed")
	}
}

// At the cap with every producer busy, a new topic waits for one to become idle; when
// that does not happen before its context ends it fails as unavailable.
func TestPoolAtTheCapWaitsForAnIdleProducer(t *testing.T) {
	b := fakeBroker(t)
	p, _ := newPool(t, newClient(t, b.URL()), Options{MaxProducers: 1})
	if _, err := publish(t, p, topicName(0), "warm"); err != nil {
		t.Fatal(err)
	}
	b.HoldReceipts(true)
	first := make(chan error, 1)
	p.PublishAsync(context.Background(), &ingress.Message{Topic: topicName(0), Payload: []byte("held")}, func(_ string, err error) { first <- err })
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error, 1)
	go p.PublishAsync(ctx, &ingress.Message{Topic: topicName(1), Payload: []byte("waits")}, func(_ string, err error) { second <- err })
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("second topic at the cap: %v", err)
	}
	b.HoldReceipts(false)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := publish(t, p, topicName(1), "now"); err != nil {
		t.Fatalf("once the first producer is idle the second topic gets one: %v", err)
	}
}

// The process-wide budget: a record that does not fit waits (the ingress reader stops)
// and is never dropped; it goes once the broker's receipts free the bytes.
func TestPoolWaitsForTheBudget(t *testing.T) {
	b := fakeBroker(t)
	bud := budget.New(1000 + ingress.RecordOverhead) // a record's charge is its bytes and the overhead
	p, _ := newPool(t, newClient(t, b.URL()), Options{Budget: bud})
	if _, err := publish(t, p, topicName(0), "warm"); err != nil {
		t.Fatal(err)
	}
	b.HoldReceipts(true)
	big := make([]byte, 600)
	first := make(chan error, 1)
	p.PublishAsync(context.Background(), &ingress.Message{Topic: topicName(0), Payload: big}, func(_ string, err error) { first <- err })
	if st := bud.Stats(); st.Used != 600+ingress.RecordOverhead {
		t.Fatalf("budget used %d after a 600-byte record was queued, want it and the record's overhead, %d", st.Used, 600+ingress.RecordOverhead)
	}
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan error, 1)
	go p.PublishAsync(ctx, &ingress.Message{Topic: topicName(0), Payload: big}, func(_ string, err error) { waiting <- err })
	cancel()
	if err := <-waiting; !errors.Is(err, context.Canceled) {
		t.Fatalf("a record over the budget was not held back: %v", err)
	}
	second := make(chan error, 1)
	go p.PublishAsync(context.Background(), &ingress.Message{Topic: topicName(0), Payload: big}, func(_ string, err error) { second <- err })
	b.HoldReceipts(false)
	for _, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(wait):
			t.Fatal("a record waiting for the budget was never published")
		}
	}
	if n := len(b.Messages(topicName(0))); n != 3 {
		t.Fatalf("%d messages, want 3 (the cancelled one never sent)", n)
	}
	if st := bud.Stats(); st.Used != 0 || st.Peak > 1000+ingress.RecordOverhead {
		t.Fatalf("budget %+v after every receipt", st)
	}
}

func TestPoolRefusesAfterClose(t *testing.T) {
	b := fakeBroker(t)
	p, _ := newPool(t, newClient(t, b.URL()), Options{})
	if _, err := publish(t, p, topicName(0), "x"); err != nil {
		t.Fatal(err)
	}
	p.Close()
	if _, err := publish(t, p, topicName(0), "y"); !errors.Is(err, ingress.ErrUnavailable) {
		t.Fatalf("after Close: %v", err)
	}
}

// slowChunks yields size bytes, pausing after each chunk until the previous one was
// persisted and the producer's send timeout has passed: an upload that outlasts the
// timeout, with every chunk stored in time.
type slowChunks struct {
	b         *pulsartest.Broker
	topic     string
	chunk     int
	left      int
	readInRow int
	given     int // chunks handed to the producer whole
	pause     time.Duration
}

func (r *slowChunks) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if r.readInRow == r.chunk {
		// The chunk before is on its way: wait for the broker to hold it, then let the
		// send timeout pass before the next chunk's bytes arrive.
		r.given++
		for end := time.Now().Add(wait); len(r.b.Messages(r.topic)) < r.given; {
			if time.Now().After(end) {
				return 0, errors.New("a chunk was never persisted")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(r.pause) // the duration under test: longer than the send timeout
		r.readInRow = 0
	}
	n := min(len(p), r.left, r.chunk-r.readInRow)
	for i := range n {
		p[i] = 'x'
	}
	r.left -= n
	r.readInRow += n
	return n, nil
}

// A streamed record whose upload outlasts the send timeout must not fail when every
// chunk was persisted in time: the timeout runs per chunk, from when its bytes were read.
func TestPoolStreamedRecordOutlastingTheSendTimeoutIsStored(t *testing.T) {
	b := fakeBroker(t)
	const sendTimeout = 150 * time.Millisecond
	// Each receipt takes most of the send timeout, so the producer's timeout check sees
	// every chunk while it is pending.
	b.SetReceiptDelay(sendTimeout * 2 / 3)
	p, _ := newPool(t, newClient(t, b.URL()), Options{Producer: pulsar.ProducerOptions{SendTimeout: sendTimeout, ChunkSize: 1024}})
	r := &slowChunks{b: b, topic: topicName(0), chunk: 1024, left: 4 * 1024, pause: 2 * sendTimeout}
	id, err := p.PublishStream(context.Background(), &ingress.Message{Topic: topicName(0)}, 4*1024, r)
	if err != nil {
		t.Fatalf("a record whose chunks were all persisted in time failed: %v", err)
	}
	if id == "" || len(b.Messages(topicName(0))) != 4 {
		t.Fatalf("id %q, %d chunks stored", id, len(b.Messages(topicName(0))))
	}
}
