package backoff

import (
	"testing"
	"time"
)

func TestDelayGrowsAndJitterNeverPassesTheCap(t *testing.T) {
	s := Schedule{Initial: time.Second, Multiplier: 2, Jitter: 0.2, Max: 120 * time.Second}
	for _, tc := range []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{0, 0.5, time.Second},
		{0, 0, 800 * time.Millisecond},
		{3, 0.5, 8 * time.Second},
		{10, 0.5, 120 * time.Second},
		{10, 0, 96 * time.Second},
		// At the cap, the upper half of the spread folds back below it: u=0.75 would
		// be 132 s, and is 108 s.
		{10, 0.75, 108 * time.Second},
		{1000, 0.999999, 96 * time.Second},
	} {
		got := s.Delay(tc.attempt, tc.u)
		if d := got - tc.want; d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.u, got, tc.want)
		}
	}
	for attempt := range 20 {
		for i := range 100 {
			u := float64(i) / 100
			if d := s.Delay(attempt, u); d > s.Max || d <= 0 {
				t.Fatalf("Delay(%d, %v) = %v, outside (0, %v]", attempt, u, d, s.Max)
			}
		}
	}
}
