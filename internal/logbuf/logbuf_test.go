package logbuf

import (
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Lines written by several goroutines while the buffer is read all end up in it, whole
// (the race detector checks the reads against the writes).
func TestConcurrentWritesAreKeptWhole(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, _ = b.Write([]byte("a line\n"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := strings.Count(b.String(), "a line\n"); got != 800 {
		t.Fatalf("%d whole lines, want 800", got)
	}
}
