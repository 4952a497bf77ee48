// Package budget is the bridge's process-wide memory budget: one count of the bytes the
// bridge holds on behalf of its clients (records read from ingress bodies and not yet
// receipted, messages handed to egress and not yet acknowledged), shared by every
// stream, producer and consumer, so that memory is bounded per process and not per
// stream. It is a byte semaphore, modelled on the official Pulsar client's
// MemoryLimitController and franz-go's MaxBufferedBytes: Acquire blocks while the
// budget is spent, so a full budget stops the readers (backpressure) and drops nothing.
package budget

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by Acquire after Close: the process is shutting down.
var ErrClosed = errors.New("budget: closed")

// Budget counts bytes against a limit. A nil *Budget is unlimited: every method is a
// no-op that succeeds.
type Budget struct {
	mu     sync.Mutex
	limit  int64
	used   int64
	peak   int64
	waits  int64
	room   chan struct{} // closed and replaced whenever bytes are released
	closed bool
}

// New returns a budget of limit bytes; limit <= 0 returns nil (unlimited).
func New(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit, room: make(chan struct{})}
}

// Acquire takes n bytes, blocking until they fit or ctx ends. A request larger than the
// whole budget is admitted when nothing else is held, so it cannot wait for ever.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	waited := false
	for {
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			return ErrClosed
		}
		if b.used == 0 || b.used+n <= b.limit {
			b.used += n
			b.peak = max(b.peak, b.used)
			b.mu.Unlock()
			return nil
		}
		if !waited {
			waited = true
			b.waits++
		}
		room := b.room
		b.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TryAcquire takes n bytes if they fit now.
func (b *Budget) TryAcquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || !(b.used == 0 || b.used+n <= b.limit) {
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	return true
}

// TryReserve takes n bytes only if used + n stays within the limit now: unlike
// TryAcquire, an empty budget does not admit more than its limit. Consumers reserve
// their permits in flight with it (see pulsar.MemoryLimiter).
func (b *Budget) TryReserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.used+n > b.limit {
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	return true
}

// Charge takes n bytes whether they fit or not: for bytes already in hand that cannot be
// refused (the overshoot is bounded by the caller). Later acquisitions wait until the
// budget is back under its limit.
func (b *Budget) Charge(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used += n
	b.peak = max(b.peak, b.used)
	b.mu.Unlock()
}

// Release returns n bytes taken by Acquire or TryAcquire.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.used < 0 {
		b.mu.Unlock()
		panic("budget: released more than was acquired")
	}
	close(b.room)
	b.room = make(chan struct{})
	b.mu.Unlock()
}

// Close makes every waiting and later Acquire fail with ErrClosed; Release still works.
func (b *Budget) Close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.room)
		b.room = make(chan struct{})
	}
	b.mu.Unlock()
}

// Stats are a budget's figures.
type Stats struct {
	Limit, Used, Peak int64
	// Waits counts the acquisitions that had to wait for room.
	Waits int64
}

// Stats returns the current figures (zero for an unlimited budget).
func (b *Budget) Stats() Stats {
	if b == nil {
		return Stats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Limit: b.limit, Used: b.used, Peak: b.peak, Waits: b.waits}
}
