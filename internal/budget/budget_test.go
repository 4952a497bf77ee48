package budget

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/pulsar"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNilBudgetIsUnlimited(t *testing.T) {
	var b *Budget = New(0)
	if b != nil {
		t.Fatal("New(0) is not the unlimited nil budget")
	}
	if err := b.Acquire(context.Background(), 1<<40); err != nil || !b.TryAcquire(1<<40) {
		t.Fatal("an unlimited budget refused")
	}
	b.Release(1 << 40)
	b.Close()
}

func TestAcquireWaitsForRelease(t *testing.T) {
	b := New(100)
	if err := b.Acquire(context.Background(), 60); err != nil {
		t.Fatal(err)
	}
	if b.TryAcquire(50) {
		t.Fatal("110 of 100 bytes granted")
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(context.Background(), 50) }()
	b.Release(60)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Used != 50 || st.Peak != 60 {
		t.Fatalf("stats %+v", st)
	}
}

func TestAcquireEndsWithItsContext(t *testing.T) {
	b := New(10)
	if !b.TryAcquire(10) {
		t.Fatal("an empty budget refused its whole size")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Acquire(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	if st := b.Stats(); st.Waits != 1 || st.Used != 10 {
		t.Fatalf("stats %+v", st)
	}
}

func TestALargerRequestThanTheBudgetGoesAlone(t *testing.T) {
	b := New(10)
	if err := b.Acquire(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if b.TryAcquire(1) {
		t.Fatal("a byte granted beside an oversized request")
	}
	b.Release(100)
	if !b.TryAcquire(1) {
		t.Fatal("nothing held, yet refused")
	}
}

func TestCloseFailsWaiters(t *testing.T) {
	b := New(1)
	b.TryAcquire(1)
	got := make(chan error, 1)
	go func() { got <- b.Acquire(context.Background(), 1) }()
	b.Close()
	if err := <-got; !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	b.Release(1)
}

func TestOverReleasePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("releasing more than was acquired went unnoticed")
		}
	}()
	New(5).Release(1)
}

// TestTryReserveNeverPassesTheLimit: a reservation (a consumer's permits in flight) is
// refused beyond the limit even when the budget is empty, where TryAcquire admits one
// oversized request; and the budget is a pulsar.MemoryLimiter.
func TestTryReserveNeverPassesTheLimit(t *testing.T) {
	b := New(100)
	if b.TryReserve(101) {
		t.Fatal("an empty budget of 100 reserved 101 bytes")
	}
	if !b.TryReserve(100) || b.TryReserve(1) {
		t.Fatal("reservations up to the limit, and not beyond it, must succeed")
	}
	b.Release(100)
	b.Close()
	if b.TryReserve(1) {
		t.Fatal("a closed budget reserved")
	}
	var lim pulsar.MemoryLimiter = b
	lim.Charge(5)
	lim.Release(5)
	if st := b.Stats(); st.Used != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// waitFor blocks until n acquisitions have had to wait in all.
func waitFor(t *testing.T, b *Budget, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats().Waits < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d waiters after 10 s: %+v", n, b.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}

// A large request waiting for room is served before any later request, small ones
// included: freed bytes go to it, not to whoever asks next.
func TestALargeAcquireIsNotStarvedBySmallOnes(t *testing.T) {
	b := New(1000)
	if err := b.Acquire(context.Background(), 600); err != nil {
		t.Fatal(err)
	}
	large := make(chan error, 1)
	go func() { large <- b.Acquire(context.Background(), 500) }()
	waitFor(t, b, 1)
	// Room for 10 bytes, but the 500-byte request came first.
	if b.TryAcquire(10) {
		t.Fatal("a small try took room ahead of the waiting large request")
	}
	// A consumer's reservation does not wait its turn: its progress may be what frees
	// the room the waiter needs.
	if !b.TryReserve(10) {
		t.Fatal("a consumer's reservation with room was refused behind a waiter")
	}
	b.Release(10)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := b.Acquire(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a small Acquire went ahead of the waiting large request: %v", err)
	}
	// Small holders come and go; every byte they free goes towards the large request.
	small := make(chan error, 1)
	go func() { small <- b.Acquire(context.Background(), 10) }()
	waitFor(t, b, 3)
	b.Release(600)
	if err := <-large; err != nil {
		t.Fatal(err)
	}
	if err := <-small; err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Used != 510 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A waiter whose context ends leaves the line, and those behind it that now fit are served.
func TestAWaiterThatGivesUpLetsTheNextIn(t *testing.T) {
	b := New(1000)
	if err := b.Acquire(context.Background(), 600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- b.Acquire(ctx, 500) }()
	waitFor(t, b, 1)
	second := make(chan error, 1)
	go func() { second <- b.Acquire(context.Background(), 100) }()
	waitFor(t, b, 2)
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("first: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.Used != 700 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
}
