package pulsar_test

import (
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestABatchIsFramedWithFewAllocations: a busy producer's entries hold a few dozen
// messages each; what each entry costs besides its messages is shared by them. Framing
// one made its metadata and SEND command afresh, a dozen allocations (the messages, a
// pointer per scalar field, the encoded metadata): 26 per entry in all, 16-17 without.
// Decoding its receipt with proto.Unmarshal made the command, the receipt, the message
// id and a pointer per scalar field: 11-12 per entry with the receipt decoded in one
// allocation, 10.5-10.9 once a receipt no longer makes a channel for flushes nobody
// waits in. What is left is the entry's own (its pending item, its callbacks' list).
// The fake broker's allocations are not counted.
func TestABatchIsFramedWithFewAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	b, err := pulsartest.NewBroker()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{Topic: "persistent://public/default/batch-allocs"})
	m := &pulsar.ProducerMessage{Payload: make([]byte, 1024)} // SendAsync keeps nothing of it
	var wg sync.WaitGroup
	done := func(_ pulsar.MessageID, err error) {
		if err != nil {
			t.Error(err)
		}
		wg.Done()
	}
	run := func(n int) {
		wg.Add(n)
		for range n {
			p.SendAsync(context.Background(), m, done)
		}
		wg.Wait()
	}
	defer debug.SetGCPercent(debug.SetGCPercent(1000))
	run(2000) // the connection and the pools are made
	frames0 := b.Frames(pulsartest.CommandSend)
	n := producerAllocs(t, func() { run(30000) })
	entries := b.Frames(pulsartest.CommandSend) - frames0
	if entries == 0 {
		t.Fatal("no entry sent")
	}
	per := float64(n) / float64(entries)
	t.Logf("%d allocations for %d entries: %.1f per entry", n, entries, per)
	if per > 14 {
		t.Fatalf("%.1f allocations per entry sent (%d for %d entries)", per, n, entries)
	}
}

// producerAllocs is how many heap objects f made outside the fake broker: every
// allocation is profiled meanwhile, and those with a pulsartest frame on their stack are
// left out.
func producerAllocs(t *testing.T, f func()) int64 {
	t.Helper()
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	count := func() int64 {
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
		var objects int64
		for i := range recs {
			if !inFakeBroker(recs[i].Stack()) {
				objects += recs[i].AllocObjects
			}
		}
		return objects
	}
	o0 := count()
	f()
	return count() - o0
}

func inFakeBroker(stack []uintptr) bool {
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
