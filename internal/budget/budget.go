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

// Budget counts bytes against a limit. Waiters are served first come, first served:
// bytes released go to the oldest waiter first, and neither a later Acquire nor a
// TryAcquire takes room ahead of a waiter, so a large request is never starved by a
// stream of small ones (consumers' TryReserve is the exception, see there). A nil *Budget is unlimited: every method is a no-op
// that succeeds.
type Budget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	peak    int64
	waits   int64
	waiters []*waiter // in arrival order
	closed  bool
}

// waiter is one blocked Acquire; ready is closed once it has its bytes (granted) or
// the budget was closed.
type waiter struct {
	n       int64
	ready   chan struct{}
	granted bool
}

// New returns a budget of limit bytes; limit <= 0 returns nil (unlimited).
func New(limit int64) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit}
}

// fitsLocked says whether n bytes may be taken now by the head of the line: a request
// larger than the whole budget is admitted when nothing else is held.
func (b *Budget) fitsLocked(n int64) bool { return b.used == 0 || b.used+n <= b.limit }

// Acquire takes n bytes, blocking until they fit and every earlier waiter has been
// served, or until ctx ends (then it holds nothing). A request larger than the whole
// budget is admitted when nothing else is held, so it cannot wait for ever.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	if len(b.waiters) == 0 && b.fitsLocked(n) {
		b.takeLocked(n)
		b.mu.Unlock()
		return nil
	}
	w := &waiter{n: n, ready: make(chan struct{})}
	b.waiters = append(b.waiters, w)
	b.waits++
	b.mu.Unlock()
	select {
	case <-w.ready:
		if !w.granted {
			return ErrClosed
		}
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.granted {
		// Served while ctx ended: give the bytes back to whoever is next.
		b.used -= n
		b.grantLocked()
		return ctx.Err()
	}
	for i, o := range b.waiters {
		if o == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			break
		}
	}
	b.grantLocked() // the head may have been the one that did not fit
	return ctx.Err()
}

func (b *Budget) takeLocked(n int64) {
	b.used += n
	b.peak = max(b.peak, b.used)
}

// grantLocked serves the waiters in order while the head fits.
func (b *Budget) grantLocked() {
	for len(b.waiters) > 0 && !b.closed {
		w := b.waiters[0]
		if !b.fitsLocked(w.n) {
			return
		}
		b.takeLocked(w.n)
		w.granted = true
		close(w.ready)
		b.waiters[0] = nil
		b.waiters = b.waiters[1:]
	}
}

// TryAcquire takes n bytes if they fit now and nobody is waiting.
func (b *Budget) TryAcquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || len(b.waiters) > 0 || !b.fitsLocked(n) {
		return false
	}
	b.takeLocked(n)
	return true
}

// TryReserve takes n bytes only if used + n stays within the limit now: unlike
// TryAcquire, an empty budget does not admit more than its limit. Consumers reserve
// their permits in flight with it (see pulsar.MemoryLimiter), and unlike TryAcquire it
// does not yield to waiters: a consumer's progress (a chunked message completed, a
// message delivered and settled) is what frees the room a waiter may be waiting for,
// so holding it back behind that waiter could deadlock both; what it reserves is
// bounded per partition by the consumer's byte window.
func (b *Budget) TryReserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.used+n > b.limit {
		return false
	}
	b.takeLocked(n)
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
	b.takeLocked(n)
	b.mu.Unlock()
}

// Release returns n bytes taken by Acquire, TryAcquire, TryReserve or Charge.
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
	b.grantLocked()
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
		for _, w := range b.waiters {
			close(w.ready)
		}
		b.waiters = nil
	}
	b.mu.Unlock()
}

// Stats are a budget's figures.
type Stats struct {
	Limit, Used, Peak int64
	// Waits counts the acquisitions that had to wait for room; Waiting is how many wait now.
	Waits, Waiting int64
}

// Stats returns the current figures (zero for an unlimited budget).
func (b *Budget) Stats() Stats {
	if b == nil {
		return Stats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return Stats{Limit: b.limit, Used: b.used, Peak: b.peak, Waits: b.waits, Waiting: int64(len(b.waiters))}
}
