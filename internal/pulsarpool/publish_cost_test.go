package pulsarpool

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestPublishingAllocatesAtMostOnceARecord holds the bridge's side of a published
// record, from PublishAsync to its outcome, to one allocation (the message id's string),
// what the record's batch costs shared among its records: publishing is the ingress
// path's hot loop, and every allocation per record is paid again in garbage collection.
// The fake broker's own allocations are not counted (see bridgeAllocs).
func TestPublishingAllocatesAtMostOnceARecord(t *testing.T) {
	if raceOn {
		t.Skip("the race detector's sync.Pool drops what is put at random")
	}
	b := fakeBroker(t)
	p, _ := newPool(t, newClient(t, b.URL()), Options{})
	topic := topicName(1)
	const records = 20000
	var wg sync.WaitGroup
	m := &ingress.Message{Topic: topic, Payload: make([]byte, 100)}
	done := func(_ string, err error) { // one for all: the caller's own
		if err != nil {
			t.Error(err)
		}
		wg.Done()
	}
	run := func(n int) {
		wg.Add(n)
		for range n {
			p.PublishAsync(context.Background(), m, done)
		}
		wg.Wait()
	}
	run(1000) // the producer, its connection and its pools are made
	n, _ := bridgeAllocs(t, func() { run(records) })
	per := float64(n) / records
	t.Logf("%.3f allocations per record", per)
	if per > 1 {
		t.Fatalf("%.2f allocations per record published (%d for %d)", per, n, records)
	}
}

// TestBatchBuffersAreReused holds the bytes the bridge allocates per published record
// well below the record's size: a buffer made for every batch, as large as the batch,
// was garbage as soon as its receipt came, and zeroing and collecting those was a sixth
// of the ingress path's CPU at saturation.
func TestBatchBuffersAreReused(t *testing.T) {
	if raceOn {
		t.Skip("the race detector's sync.Pool drops what is put at random")
	}
	b := fakeBroker(t)
	p, _ := newPool(t, newClient(t, b.URL()), Options{})
	const records, size = 50000, 1024
	var wg sync.WaitGroup
	m := &ingress.Message{Topic: topicName(1), Payload: make([]byte, size)}
	done := func(_ string, err error) {
		if err != nil {
			t.Error(err)
		}
		wg.Done()
	}
	run := func(n int) {
		wg.Add(n)
		for range n {
			p.PublishAsync(context.Background(), m, done)
		}
		wg.Wait()
	}
	// The fake broker's garbage (it keeps every message) makes the collector run far
	// more often than in a bridge, and each run empties the pools of what they held
	// unused since the one before: fewer runs, as in a bridge whose broker is elsewhere.
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	run(2000)
	_, n := bridgeAllocs(t, func() { run(records) })
	per := float64(n) / records
	t.Logf("%.0f bytes allocated per %d-byte record", per, size)

	if per > size/3 {
		t.Fatalf("%.0f bytes allocated per %d-byte record published: batch buffers are not reused", per, size)
	}
}

// bridgeAllocs is how many heap objects, and bytes, f made outside the fake broker (whose
// allocations, decoding and storing every message, are not the bridge's): every
// allocation is profiled meanwhile, and those with a pulsartest frame on their stack are
// left out.
func bridgeAllocs(t *testing.T, f func()) (objects, bytes int64) {
	t.Helper()
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	count := func() (int64, int64) {
		// The profile is published by the collections that follow the allocations.
		runtime.GC()
		runtime.GC()
		var recs []runtime.MemProfileRecord
		for {
			n, ok := runtime.MemProfile(recs, true)
			if ok {
				recs = recs[:n]
				break
			}
			recs = make([]runtime.MemProfileRecord, n+64)
		}
		var objects, bytes int64
		for i := range recs {
			if !fromFakeBroker(recs[i].Stack()) {
				objects += recs[i].AllocObjects
				bytes += recs[i].AllocBytes
			}
		}
		return objects, bytes
	}
	o0, b0 := count()
	f()
	o1, b1 := count()
	return o1 - o0, b1 - b0
}

func fromFakeBroker(stack []uintptr) bool {
	frames := runtime.CallersFrames(stack)
	for {
		fr, more := frames.Next()
		if strings.Contains(fr.Function, "/pulsartest.") {
			return true
		}
		if !more {
			return false
		}
	}
}

// Message ids made in a shared block stay what they were made as however many are made
// after them, and share their allocations.
func TestMessageIDsFromTheArenaStayIntact(t *testing.T) {
	a := new(idArena)
	id := func(i int) pulsar.MessageID {
		return pulsar.MessageID{LedgerID: int64(i) * 1e12, EntryID: int64(i * 7), Partition: int32(i%3 - 1), BatchIndex: int32(i % 1000)}
	}
	var got []string
	for i := range 3000 {
		got = append(got, a.format(id(i)))
	}
	for i, s := range got {
		if want := FormatID(id(i)); s != want {
			t.Fatalf("message id %d reads %q after more were made, want %q", i, s, want)
		}
	}
	if n := testing.AllocsPerRun(1000, func() { _ = a.format(id(12)) }); n > 0.2 {
		t.Errorf("%v allocations per message id, want a fraction of one", n)
	}
}

// TestPoolReadsTheClockWhenAProducerGoesIdle: the pool notes when a producer was last
// used for its idle eviction and the cap's least-recently-used choice, both of which look
// only at producers with nothing in flight; reading the clock for every record, twice
// (when it was sent and when it was answered), was a share of the ingress path's CPU.
func TestPoolReadsTheClockWhenAProducerGoesIdle(t *testing.T) {
	b := fakeBroker(t)
	var reads atomic.Int64
	p, _ := newPool(t, newClient(t, b.URL()), Options{now: func() time.Time { reads.Add(1); return time.Now() }})
	topic := topicName(1)
	if _, err := publish(t, p, topic, "first"); err != nil {
		t.Fatal(err)
	}
	const records = 200
	var wg sync.WaitGroup
	wg.Add(records)
	b.HoldReceipts(true)
	reads.Store(0)
	for range records {
		p.PublishAsync(context.Background(), &ingress.Message{Topic: topic, Payload: []byte("x")}, func(_ string, err error) {
			if err != nil {
				t.Error(err)
			}
			wg.Done()
		})
	}
	b.HoldReceipts(false)
	wg.Wait()
	if n := reads.Load(); n > 2 {
		t.Fatalf("the clock was read %d times for %d records sent and answered together", n, records)
	}
}
