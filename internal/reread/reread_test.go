package reread

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A value is made again only once its interval has passed since it was last made (a
// failed attempt counting as made), and a failed load keeps the value made last.
func TestAValueIsMadeAgainAtMostOnceAnIntervalAndKeptOnFailure(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	loads, next := 0, "a"
	var fail error
	e, err := New(time.Second, t0, func() (string, error) {
		loads++
		return next, fail
	})
	if err != nil || loads != 1 {
		t.Fatalf("New: %v after %d loads", err, loads)
	}
	next = "b"
	if got := e.Get(t0.Add(999 * time.Millisecond)); got != "a" || loads != 1 {
		t.Fatalf("within the interval: %q after %d loads, want a after 1", got, loads)
	}
	if got := e.Get(t0.Add(time.Second)); got != "b" || loads != 2 {
		t.Fatalf("after the interval: %q after %d loads, want b after 2", got, loads)
	}
	next, fail = "c", errors.New("the file is gone")
	if got := e.Get(t0.Add(2 * time.Second)); got != "b" || loads != 3 {
		t.Fatalf("a failed load: %q after %d loads, want b (kept) after 3", got, loads)
	}
	fail = nil
	if got := e.Get(t0.Add(2500 * time.Millisecond)); got != "b" || loads != 3 {
		t.Fatalf("within the interval after a failure: %q after %d loads, want b after 3", got, loads)
	}
	if got := e.Get(t0.Add(3 * time.Second)); got != "c" || loads != 4 {
		t.Fatalf("after it: %q after %d loads, want c after 4", got, loads)
	}
}

// New's first load failing is New's error.
func TestNewFailsWithTheFirstLoadsError(t *testing.T) {
	bad := errors.New("no such file")
	if _, err := New(time.Second, time.Now(), func() (int, error) { return 0, bad }); !errors.Is(err, bad) {
		t.Fatalf("New: %v, want %v", err, bad)
	}
}

// A caller never waits for another's load: while one is loading, the others take the
// value made last.
func TestACallerDoesNotWaitForAnothersLoad(t *testing.T) {
	t0 := time.Unix(1e9, 0)
	inLoad, release := make(chan struct{}), make(chan struct{})
	first := true
	e, err := New(time.Second, t0, func() (int, error) {
		if first {
			first = false
			return 1, nil
		}
		close(inLoad)
		<-release
		return 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan int)
	go func() { done <- e.Get(t0.Add(time.Second)) }()
	<-inLoad
	if got := e.Get(t0.Add(time.Second)); got != 1 {
		t.Fatalf("beside a load under way: %d, want 1", got)
	}
	close(release)
	if got := <-done; got != 2 {
		t.Fatalf("the loading caller got %d, want 2", got)
	}
}
