package pulsar

import (
	"context"
	"testing"
	"time"
)

// TestALimiterThatNeverWaitsMakesNoChannel: every receipt releases what its entry held
// of the producer's pending limits; a producer whose sends never wait for room (the
// bridge's, bounded by its own budget first) made and dropped a channel at every
// release all the same.
func TestALimiterThatNeverWaitsMakesNoChannel(t *testing.T) {
	l := newLimiter(10, 1<<20)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		if err := l.acquire(ctx, 1, 100, nil); err != nil {
			t.Fatal(err)
		}
		l.release(1, 100)
	}); n != 0 {
		t.Fatalf("%.1f allocations per acquire and release without waiting, want 0", n)
	}
}

// TestALimiterWakesWhoWaitsForRoom: one who waits for room gets it when room is made,
// however many releases came before while nobody waited.
func TestALimiterWakesWhoWaitsForRoom(t *testing.T) {
	l := newLimiter(2, 1<<20)
	ctx := context.Background()
	for range 3 {
		_ = l.acquire(ctx, 1, 1, nil)
		l.release(1, 1)
	}
	_ = l.acquire(ctx, 2, 2, nil) // full
	got := make(chan error, 1)
	go func() { got <- l.acquire(ctx, 1, 1, nil) }()
	select {
	case err := <-got:
		t.Fatalf("acquired (%v) while the limiter was full", err)
	case <-time.After(50 * time.Millisecond):
	}
	l.release(1, 1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release that made room")
	}
}
