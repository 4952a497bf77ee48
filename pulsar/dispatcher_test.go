package pulsar

import (
	"runtime"
	"testing"
)

func TestADispatcherStartsItsGoroutineWithItsFirstCallback(t *testing.T) {
	// Every consumer has a dispatcher, most never a callback: an idle goroutine each
	// was a stack per egress stream.
	before := runtime.NumGoroutine()
	const n = 50
	idle := make([]*dispatcher, n)
	for i := range idle {
		idle[i] = newDispatcher()
	}
	if added := runtime.NumGoroutine() - before; added > n/10 {
		t.Fatalf("%d dispatchers without a callback run %d goroutines", n, added)
	}
	for _, d := range idle {
		d.close()
	}
	// A dispatcher with callbacks runs them in order, on its goroutine, and closes.
	d := newDispatcher()
	got := make(chan int, 3)
	for i := range 3 {
		d.push(completion{cb: func(MessageID, error) { got <- i }})
	}
	d.close()
	for want := range 3 {
		if i := <-got; i != want {
			t.Fatalf("callback %d ran as %d", want, i)
		}
	}
	// After close, a callback runs at once, started or not.
	ran := false
	idle[0].push(completion{cb: func(MessageID, error) { ran = true }})
	if !ran {
		t.Fatal("a callback pushed after close did not run")
	}
}

func TestADispatcherWithoutACallbackIsOneAllocation(t *testing.T) {
	// Every egress stream's consumer has a dispatcher that mostly never runs a
	// callback: its channels, made up front, were three allocations and 0.4 KiB an
	// idle stream.
	if n := testing.AllocsPerRun(100, func() { newDispatcher().close() }); n != 1 {
		t.Fatalf("a dispatcher made and closed without a callback allocates %v times, want 1 (itself)", n)
	}
}
