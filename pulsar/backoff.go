package pulsar

import (
	"context"
	"math/rand/v2"
	"time"
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
// failure up to Max, each wait varied by +-Jitter (a fraction).
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

// delay returns the wait before retry number attempt (0-based).
func (b Backoff) delay(attempt int) time.Duration {
	d := float64(b.Initial)
	for range attempt {
		d *= b.Multiplier
		if d >= float64(b.Max) {
			d = float64(b.Max)
			break
		}
	}
	d *= 1 + b.Jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}
