package pulsar

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/recordio-bridge/bridge/internal/backoff"
)

// contextUntil returns a context that ends when done is closed or cancel is called:
// a reconnect attempt stops as soon as its owner closes.
func contextUntil(done <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-done:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Backoff is the reconnect schedule: Initial, multiplied by Multiplier after each
// failure up to Max, each wait varied by +-Jitter (a fraction) and never above Max.
type Backoff struct {
	Initial    time.Duration // default 100 ms
	Multiplier float64       // default 1.6
	Jitter     float64       // default 0.2
	Max        time.Duration // default 30 s
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 100 * time.Millisecond
	}
	if b.Multiplier < 1 {
		b.Multiplier = 1.6
	}
	if b.Jitter <= 0 || b.Jitter >= 1 {
		b.Jitter = 0.2 // some jitter always: reconnecting clients must not move in lockstep
	}
	if b.Max <= 0 {
		b.Max = 30 * time.Second
	}
	return b
}

// delay returns the wait before retry number attempt (0-based), never above Max.
func (b Backoff) delay(attempt int) time.Duration {
	return backoff.Schedule{Initial: b.Initial, Multiplier: b.Multiplier, Jitter: b.Jitter, Max: b.Max}.Delay(attempt, rand.Float64())
}
