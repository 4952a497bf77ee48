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

// TestALimiterLosesNoWakeUpUnderContention: senders that wait for room race with the
// releases that make it (the channel made by the first to wait, dropped by the release
// that closes it); every one of them must get its room, none left waiting with room
// there. 16 goroutines share a limiter of 2 messages, 2 000 acquisitions each.
func TestALimiterLosesNoWakeUpUnderContention(t *testing.T) {
	l := newLimiter(2, 1<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for range 2000 {
				if err := l.acquire(ctx, 1, 10, nil); err != nil {
					errs <- err
					return
				}
				l.release(1, 10)
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			n, b := l.pending()
			t.Fatalf("a sender waited for room until %v, with %d messages and %d bytes pending of 2", err, n, b)
		}
	}
	if n, b := l.pending(); n != 0 || b != 0 {
		t.Fatalf("%d messages and %d bytes pending after every release", n, b)
	}
}
