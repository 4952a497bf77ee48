package ingress

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// stopReading makes the body reader fail with err from its next read on. A read in
// progress is given stopGrace to finish: a client that is sending completes it (and the
// body stays readable, so lingerForTheClient can drain it cleanly), a silent one times out.
//
// A body already read to its end gets no deadline: net/http then reads the connection in
// the background (to notice a client that goes away), and a deadline would fail that
// read and cancel the connection's context, so the next request a kept-alive client
// sends on it would start cancelled (see bodyReader.Read for the race with a read that
// is ending).
func (st *stream) stopReading(err error) {
	st.bodyMu.Lock()
	defer st.bodyMu.Unlock()
	if st.stopErr == nil {
		st.stopErr = err
		if !st.sawEOF.Load() {
			_ = st.rc.SetReadDeadline(time.Now().Add(stopGrace))
		}
	}
}

const stopGrace = 100 * time.Millisecond

// lingerForTheClient reads and drops what the client still sends, for up to a second or
// until it ends its body, so it can read the summary before the connection closes.
// Closing a socket with unread input makes the kernel reset it, and a reset can destroy
// the summary in flight; a client that sees its body rejected may also drop the
// connection. A client that reads the summary and ends its body lets this return at once.
//
// A body read to its end already has nothing to drop, and a deadline would cut net/http's
// background read (see stopReading).
func (st *stream) lingerForTheClient() {
	if st.sawEOF.Load() {
		return
	}
	_ = st.rc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, st.c.Request().Body, lingerBytes)
}

const (
	lingerTime  = time.Second
	lingerBytes = 64 << 20
)

var (
	errIdle        = errors.New("the request body was idle too long")
	errUnavailable = errors.New("stopped reading: the broker is unavailable")
	errTakenOver   = errors.New("stopped reading: the named stream was taken over by another request")
)

// bodyReader reads the request body with the idle timeout, and fails at once after
// stopReading.
type bodyReader struct {
	st *stream
	r  io.Reader
}

func (b *bodyReader) Read(p []byte) (int, error) {
	st := b.st
	st.bodyMu.Lock()
	if st.stopErr != nil {
		err := st.stopErr
		st.bodyMu.Unlock()
		return 0, err
	}
	if st.sawEOF.Load() {
		// Ended: no deadline for a read that has nothing to wait for (see below).
		st.bodyMu.Unlock()
		return 0, io.EOF
	}
	_ = st.rc.SetReadDeadline(time.Now().Add(st.limits.IdleTimeout))
	st.bodyMu.Unlock()
	n, err := b.r.Read(p)
	st.lastRead = time.Now()
	if err != nil {
		err = b.readError(err)
	}
	return n, err
}

// readError says what a failed read of the body means for the stream, and notes the
// body's end. A function of its own: the handler of an idle stream waits in Read, and
// a small frame there lets the runtime halve its stack (see stream.run).
//
//go:noinline
func (b *bodyReader) readError(err error) error {
	st := b.st
	if errors.Is(err, io.EOF) {
		// net/http lifted the read deadline as the body ended and reads the connection in
		// the background from then on; a deadline set meanwhile (stopReading, racing with
		// this read) would fail that read and cancel the connection's context, and with it
		// every later request of a kept-alive client. Lifted again, and none is set after.
		st.bodyMu.Lock()
		st.sawEOF.Store(true)
		_ = st.rc.SetReadDeadline(time.Time{})
		st.bodyMu.Unlock()
		return err
	}
	st.bodyMu.Lock()
	stop := st.stopErr
	st.bodyMu.Unlock()
	switch {
	case stop != nil:
		return stop
	case isTimeout(err):
		return fmt.Errorf("%w (ingress.idleTimeout is %s)", errIdle, st.limits.IdleTimeout)
	case errors.Is(err, io.ErrUnexpectedEOF):
		// The body ended before its Content-Length (or its last chunk): a client that
		// half-closed may still be reading, and is told so (400), not "went away".
		return fmt.Errorf("the request body ended early: %w", err)
	case st.ctx.Err() != nil:
		return st.ctx.Err()
	}
	return err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
