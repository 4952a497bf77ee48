// Package reread keeps a value made from files (a mounted Secret's token, a
// certificate pair) current without a reload or a restart: it is made again when it is
// asked for and a second (or the interval given) has passed since it was last made. One
// caller at a time makes it; the others meanwhile, and every caller after a failure,
// take the value made last: a Secret volume swaps its files atomically, so a failed read
// is a fault, not a rotation.
package reread

import (
	"sync"
	"sync/atomic"
	"time"
)

// Every is a value made by load, made again at most once an interval.
type Every[T any] struct {
	every   time.Duration
	load    func() (T, error)
	cur     atomic.Pointer[T]
	checked atomic.Int64 // UnixNano of the last load
	mu      sync.Mutex   // held by the caller making the value
}

// New makes the value once, at now, and returns it to be made again by load at most
// once every interval; load's first error is New's.
func New[T any](every time.Duration, now time.Time, load func() (T, error)) (*Every[T], error) {
	v, err := load()
	if err != nil {
		return nil, err
	}
	e := &Every[T]{every: every, load: load}
	e.cur.Store(&v)
	e.checked.Store(now.UnixNano())
	return e, nil
}

// Get returns the value as of now: made again first when the interval has passed since
// it was last made and no other caller is making it; the value made last when load
// fails. It never waits for another caller's load.
func (e *Every[T]) Get(now time.Time) T {
	if now.UnixNano()-e.checked.Load() >= int64(e.every) && e.mu.TryLock() {
		if v, err := e.load(); err == nil {
			e.cur.Store(&v)
		}
		e.checked.Store(now.UnixNano())
		e.mu.Unlock()
	}
	return *e.cur.Load()
}
