package oauth2

import (
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/internal/backoff"
)

func TestTheNextRefreshIsAtNinetyPercentOfTheLifetimeAndFailuresFollowTheRetrySchedule(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(10 * time.Second)
	retry := backoff.Schedule{Initial: time.Second, Multiplier: 2, Jitter: 0.2, Max: 8 * time.Second}
	s := &Source{o: Options{RefreshAfter: 0.9, Retry: retry, Now: func() time.Time { return now }}}
	s.token, s.obtained, s.expiry = "t", t0, t0.Add(100*time.Second)
	if got := s.nextWait(); got != 80*time.Second {
		t.Fatalf("nextWait = %v 10 s after a 100 s token was obtained, want 80 s (refresh at 90 s)", got)
	}
	for failures, base := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		s.failures, s.lastErr = failures+1, errors.New("down")
		got := s.nextWait()
		lo, hi := time.Duration(float64(base)*0.8), min(time.Duration(float64(base)*1.2), retry.Max)
		if got < lo || got > hi {
			t.Fatalf("after %d failures: %v, want within [%v, %v]", failures+1, got, lo, hi)
		}
	}
	// The token stays valid through the failures until its expiry.
	now = t0.Add(99 * time.Second)
	if _, err := s.Status(); err != nil {
		t.Fatalf("Status before expiry: %v", err)
	}
	now = t0.Add(100 * time.Second)
	if _, err := s.Status(); !errors.Is(err, ErrNoToken) {
		t.Fatalf("Status at expiry: %v", err)
	}
}
