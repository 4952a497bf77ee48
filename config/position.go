package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Position is a parsed streams[].position (or ?position=): where a stream reads from.
// Earliest and latest say where a subscription that does not exist yet starts; a time
// or a message id moves the subscription, new or not, there with the protocol's SEEK
// each time a stream opens.
type Position struct {
	// Initial is earliest or latest: where a new subscription is created.
	Initial string
	// Time, when not zero: the subscription is moved to the first message published at
	// or after it, on every partition.
	Time time.Time
	// ID, when not empty, is ledger:entry:partition:batchIndex: the subscription is
	// moved to that message (its partition's, for a partitioned topic).
	ID string
}

// Seeks reports whether the position moves the subscription (a time or an id).
func (p Position) Seeks() bool { return !p.Time.IsZero() || p.ID != "" }

// ErrPosition: a position that is none of the forms ParsePosition reads.
var ErrPosition = errors.New("not a position")

// ParsePosition reads earliest, latest, an RFC 3339 time (2026-12-06T10:00:00Z) or
// id:ledger:entry:partition:batchIndex (the id a JSON envelope's messageId gives,
// behind "id:"). The error names the value.
func ParsePosition(v string) (Position, error) {
	switch {
	case v == "earliest" || v == "latest":
		return Position{Initial: v}, nil
	case strings.HasPrefix(v, "id:"):
		id, err := ParseMessageID(strings.TrimPrefix(v, "id:"))
		if err != nil {
			return Position{}, fmt.Errorf("%w: %.80q: %v", ErrPosition, v, err)
		}
		return Position{Initial: "latest", ID: id}, nil
	case len(v) > 0 && v[0] >= '0' && v[0] <= '9':
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return Position{}, fmt.Errorf("%w: %.80q is not an RFC 3339 time (such as 2026-12-06T10:00:00Z): %v", ErrPosition, v, err)
		}
		if t.UnixMilli() < 0 {
			return Position{}, fmt.Errorf("%w: %.80q is before 1970", ErrPosition, v)
		}
		return Position{Initial: "latest", Time: t}, nil
	}
	return Position{}, fmt.Errorf("%w: %.80q is not earliest, latest, an RFC 3339 time (2026-12-06T10:00:00Z) or id:ledger:entry:partition:batchIndex", ErrPosition, v)
}

// ParseMessageID checks ledger:entry:partition:batchIndex as the Pulsar client reads it
// (ledger and entry not negative, partition and batch index from -1 to 2^31-1) and
// returns it in canonical form.
func ParseMessageID(s string) (string, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return "", fmt.Errorf("want ledger:entry:partition:batchIndex (4 numbers), got %d parts", len(parts))
	}
	names := [4]string{"ledger", "entry", "partition", "batchIndex"}
	out := make([]string, 4)
	for i, p := range parts {
		lo, hi := int64(0), int64(math.MaxInt64)
		if i >= 2 {
			lo, hi = -1, math.MaxInt32
		}
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < lo || n > hi {
			return "", fmt.Errorf("%s %q is not a number from %d to %d", names[i], p, lo, hi)
		}
		out[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(out, ":"), nil
}
