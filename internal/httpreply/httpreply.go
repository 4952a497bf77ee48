// Package httpreply writes the answers ingress and egress give a request before (or
// instead of) its stream, the same way for both: a JSON error, with Retry-After when
// asked, after what is left of the request body is dropped within a short grace. It
// chooses no status: ingress and egress pass the one they chose.
package httpreply

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
)

// Error writes {"status": status, "error": msg} as the answer, with Retry-After:
// retryAfter seconds when above 0, after SettleBody (the body not read to its end).
func Error(c echo.Context, status int, msg string, retryAfter int) error {
	SettleBody(c, false)
	if retryAfter > 0 {
		c.Response().Header().Set("Retry-After", strconv.Itoa(retryAfter))
	}
	return c.JSON(status, map[string]any{"status": status, "error": msg})
}

// Challenge is Error for a request without a valid token: challenge goes into
// WWW-Authenticate.
func Challenge(c echo.Context, status int, msg, challenge string) error {
	c.Response().Header().Set("WWW-Authenticate", challenge)
	return Error(c, status, msg, 0)
}

// SettleBody readies an HTTP/1.x connection for an answer written before the request
// body was read to its end (sawEOF: the handler read it to its end, nothing to do). A
// body that did not end within DropBody's grace makes the connection close after the
// answer.
func SettleBody(c echo.Context, sawEOF bool) {
	if !sawEOF && !DropBody(c) {
		c.Response().Header().Set("Connection", "close")
	}
}

// DropBody reads and drops what is left of an HTTP/1.x request body for at most
// discardGrace and reports whether it ended (true for HTTP/2, which answers a stream
// without touching the connection, and for a body read to its end already). net/http
// would otherwise read and drop up to 256 KiB of it, with no deadline, before the
// answer's first byte: a client streaming an endless body would not see its 429, 404 or
// 400 until it had sent that much or closed the body, and a request announcing a body it
// never sends would hold the answer (and a GET's subscription) for as long as its
// connection stays open. When it reports false, the connection must close after the
// answer (SettleBody does that).
//
// Its outcome is kept on c: a later call (an answer after a body that did not end)
// returns it at once instead of waiting out a second grace.
func DropBody(c echo.Context) bool {
	if v, ok := c.Get(bodyDroppedKey).(bool); ok {
		return v
	}
	ended := dropBodyOnce(c)
	c.Set(bodyDroppedKey, ended)
	return ended
}

// bodyDroppedKey holds DropBody's outcome on an echo.Context.
const bodyDroppedKey = "bridge.bodyDropped"

func dropBodyOnce(c echo.Context) bool {
	req := c.Request()
	if req.ProtoMajor != 1 || req.ContentLength == 0 {
		return true
	}
	if req.ContentLength >= maxDiscard {
		return false
	}
	rc := http.NewResponseController(c.Response())
	_ = rc.SetReadDeadline(time.Now().Add(discardGrace))
	_, err := io.CopyN(io.Discard, req.Body, maxDiscard)
	ended := errors.Is(err, io.EOF) || errors.Is(err, http.ErrBodyReadAfterClose)
	if ended {
		// The grace is over. net/http lifts the deadline itself when it sees the end, but
		// not for a body that had ended before: left on the connection, the deadline would
		// fail net/http's background read and cancel the request's context under the
		// handler (a /nack dead-lettering for longer than the grace lost its publication).
		_ = rc.SetReadDeadline(time.Time{})
	}
	return ended
}

const (
	maxDiscard   = 256 << 10 // net/http's own bound on a body it drops
	discardGrace = 200 * time.Millisecond
)
