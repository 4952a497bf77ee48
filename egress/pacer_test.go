package egress

import (
	"testing"
	"time"
)

// TestPacerHoldsTheRate: on a simulated clock, a stream sending as fast as the pacer lets
// it sends N records in (N-1)/rate less the burst, and a byte limit binds large records.
func TestPacerHoldsTheRate(t *testing.T) {
	for _, c := range []struct {
		name           string
		rate, byteRate float64
		size           int64
		n              int
		want           time.Duration
	}{
		{"200 records/s", 200, 0, 10, 2001, 10*time.Second - paceBurst},
		{"1 MB/s of 10 kB records", 0, 1e6, 10_000, 1001, 10*time.Second - paceBurst},
		{"both: the bytes bind", 1000, 1e5, 1000, 1001, 10*time.Second - paceBurst},
		{"no limit", 0, 0, 1 << 20, 1000, 0},
	} {
		p := pacer{rate: c.rate, byteRate: c.byteRate}
		start := time.Unix(1000, 0)
		now := start
		for range c.n {
			now = now.Add(p.next(now, c.size))
		}
		if got := now.Sub(start); got < c.want-time.Millisecond || got > c.want+time.Millisecond {
			t.Errorf("%s: %d records took %v, want %v", c.name, c.n, got, c.want)
		}
	}
}

// TestPacerDoesNotSaveUpAnIdleStreamsRate: after a pause, a stream may burst only a
// second's worth, not everything it did not send.
func TestPacerDoesNotSaveUpAnIdleStreamsRate(t *testing.T) {
	p := pacer{rate: 100}
	now := time.Unix(1000, 0)
	p.next(now, 1)
	now = now.Add(time.Minute)
	free := 0
	for p.next(now, 1) == 0 {
		free++
	}
	if free != 101 { // the burst (100 records) and the one due now
		t.Fatalf("%d records without waiting after an idle minute, want 101", free)
	}
}
