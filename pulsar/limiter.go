package pulsar

import (
	"context"
	"sync"
)

// limiter bounds the messages and bytes waiting for the broker. acquire blocks until
// there is room; a single message larger than the byte bound is let through when
// nothing else is pending, so it cannot wait forever.
type limiter struct {
	mu         sync.Mutex
	maxN, maxB int
	n, b       int
	// room is closed when room is made while someone waits on it; made by the first
	// to wait, so that a producer whose sends never wait (the usual case) makes no
	// channel per receipt.
	room chan struct{}
}

func newLimiter(maxN, maxB int) *limiter {
	return &limiter{maxN: maxN, maxB: maxB}
}

func (l *limiter) acquire(ctx context.Context, n, b int, stop <-chan struct{}) error {
	for {
		l.mu.Lock()
		if (l.n == 0) || (l.n+n <= l.maxN && l.b+b <= l.maxB) {
			l.n += n
			l.b += b
			l.mu.Unlock()
			return nil
		}
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		case <-stop:
			return ErrProducerClosed
		}
	}
}

func (l *limiter) release(n, b int) {
	if n == 0 && b == 0 {
		return
	}
	l.mu.Lock()
	l.n -= n
	l.b -= b
	if l.room != nil {
		close(l.room)
		l.room = nil // the next to wait makes another
	}
	l.mu.Unlock()
}

func (l *limiter) pending() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.b
}

// completion is one callback with its result; a value, so completing a message
// allocates nothing.
type completion struct {
	cb  func(MessageID, error)
	id  MessageID
	err error
}

// dispatcher runs callbacks in order on its own goroutine, so user code never runs on
// a connection's reader and a slow callback delays only its own producer. The goroutine
// and its channels come with the first callback: a consumer's dispatcher, which only
// tells of an active consumer's change, mostly has none, and an idle goroutine per
// consumer was a stack per egress stream, its three channels 0.4 KiB.
type dispatcher struct {
	mu      sync.Mutex
	queue   []completion
	closed  bool // stopped: push runs callbacks itself
	started bool // run is running (or has run); the channels are made before it is set
	signal  chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

func newDispatcher() *dispatcher { return &dispatcher{} }

func (d *dispatcher) push(cs ...completion) {
	if len(cs) == 0 {
		return
	}
	d.mu.Lock()
	if d.closed {
		// The goroutine is gone (its owner closed): run them here, so that every
		// callback still runs exactly once.
		d.mu.Unlock()
		for _, c := range cs {
			c.cb(c.id, c.err)
		}
		return
	}
	d.queue = append(d.queue, cs...)
	if !d.started {
		d.signal, d.stop, d.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
		d.started = true
		go d.run()
	}
	d.mu.Unlock()
	select {
	case d.signal <- struct{}{}:
	default:
	}
}

func (d *dispatcher) run() {
	defer close(d.done)
	var batch []completion
	for {
		select {
		case <-d.signal:
		case <-d.stop:
			d.mu.Lock()
			batch, d.queue = d.queue, nil
			d.closed = true
			d.mu.Unlock()
			for _, c := range batch {
				c.cb(c.id, c.err)
			}
			return
		}
		d.mu.Lock()
		batch, d.queue = d.queue, batch[:0]
		d.mu.Unlock()
		for i, c := range batch {
			c.cb(c.id, c.err)
			batch[i] = completion{}
		}
	}
}

// close runs what is queued and stops the goroutine.
func (d *dispatcher) close() {
	d.mu.Lock()
	started := d.started
	if !started {
		d.closed = true // nothing queued: later callbacks run in push
	}
	d.mu.Unlock()
	if started {
		close(d.stop)
		<-d.done
	}
}
