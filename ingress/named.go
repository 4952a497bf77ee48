package ingress

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Named streams (Stream-Name, Stream-Sequence): exactly-once ingress through the
// broker's deduplication. See docs/exactly-once.md.

var (
	// ErrDuplicate is what a Publisher answers (as done's error) for a record that the
	// broker had already persisted (a named stream's resend, or any record the producer
	// itself resent after a reconnect): a success, with no new message id.
	ErrDuplicate = errors.New("already persisted")
	// ErrStreamBusy: another request is publishing the same route and stream name (409).
	ErrStreamBusy = errors.New("stream name in use")
	// ErrTakenOver: a record of a named stream was not published by this request because
	// another request (on another bridge process) took the stream over (409): its client
	// resent from there. The stream stops; a client that is still here may resume it
	// once the other request has ended.
	ErrTakenOver = errors.New("stream taken over by another request")
)

// NamedPublisher is a Publisher that can publish named streams. ClaimStream makes the
// producer name (see ProducerName) exclusive to one request until release is called,
// or fails with ErrStreamBusy. While it is held, Messages with that Producer are
// published with their Sequence as the sequence id by producers of that name, one per
// topic; after a temporary failure of one of them, the claim's later records for that
// topic fail too (ErrUnavailable) without being sent, so nothing after the lost record
// is persisted before it is resent.
type NamedPublisher interface {
	Publisher
	ClaimStream(producer string) (release func(), err error)
}

// MaxStreamName is the longest Stream-Name.
const MaxStreamName = 128

// ProducerName is the Pulsar producer name of a route's named stream. It is a function
// of the route and the stream name only, so every bridge process (and every restart)
// uses the same one; the stream name cannot hold a '/', so the pair is unambiguous.
func ProducerName(route, stream string) string { return "recordio-bridge/" + route + "/" + stream }

// namedStream is a request's Stream-Name and the sequence number of its first record.
type namedStream struct {
	name     string
	producer string
	first    int64
}

// parseNamedStream reads Stream-Name and Stream-Sequence; nil without a name.
func parseNamedStream(h http.Header, route string) (*namedStream, error) {
	name, seq := h.Values("Stream-Name"), h.Values("Stream-Sequence")
	if len(name) == 0 {
		if len(seq) > 0 {
			return nil, errors.New("Stream-Sequence needs a Stream-Name")
		}
		return nil, nil
	}
	if len(name) > 1 || len(seq) > 1 {
		return nil, errors.New("Stream-Name and Stream-Sequence may be given once each")
	}
	if err := validStreamName(name[0]); err != nil {
		return nil, err
	}
	ns := &namedStream{name: name[0], producer: ProducerName(route, name[0])}
	if len(seq) == 1 {
		n, err := parseSequence(seq[0])
		if err != nil {
			return nil, err
		}
		ns.first = n
	}
	return ns, nil
}

func validStreamName(s string) error {
	if len(s) == 0 || len(s) > MaxStreamName {
		return fmt.Errorf("Stream-Name must be 1 to %d characters, not %d", MaxStreamName, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("Stream-Name may hold only A-Z a-z 0-9 . _ - (character %d is %q)", i, c)
		}
	}
	return nil
}

// parseSequence reads an unsigned 63-bit decimal number (no sign, no spaces).
func parseSequence(s string) (int64, error) {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("Stream-Sequence must be a decimal number from 0 to %d, not %q", int64(1<<63-1), s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || s == "" {
		return 0, fmt.Errorf("Stream-Sequence must be a decimal number from 0 to %d, not %q", int64(1<<63-1), s)
	}
	return n, nil
}

// sequenceOf is the sequence number of the request's record at index, or false when it
// would pass 2^63-1.
func (ns *namedStream) sequenceOf(index int64) (int64, bool) {
	n := ns.first + index
	return n, n >= ns.first
}

// refusedForGood reports whether a record that failed with status must not be resent:
// a named stream skips it by number (resending it later, after newer records, would be
// dropped by the broker as a duplicate anyway).
func refusedForGood(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests, 499:
		return false
	case http.StatusBadGateway:
		return true
	}
	return status >= 400 && status < 500
}

// claim makes a named stream this request's, or says with which status it cannot be.
func (s *Server) claim(ns *namedStream) (release func(), status int, err error) {
	np, ok := s.pub.(NamedPublisher)
	if !ok {
		return nil, http.StatusNotImplemented, errors.New("this bridge's publisher cannot publish named streams (Stream-Name)")
	}
	release, err = np.ClaimStream(ns.producer)
	switch {
	case errors.Is(err, ErrStreamBusy):
		return nil, http.StatusConflict, fmt.Errorf("another request is publishing the stream %q on this route: %w", ns.name, err)
	case err != nil:
		return nil, http.StatusServiceUnavailable, err
	}
	return release, 0, nil
}
