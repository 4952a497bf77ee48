package pulsarpool

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar"
)

func TestSeekErrorsAreClassifiedForEgressStatuses(t *testing.T) {
	for _, c := range []struct {
		err          error
		bad, unavail bool
	}{
		{fmt.Errorf("seeking: %w", pulsar.ErrInvalidMessageID), true, false},
		{fmt.Errorf("seeking: %w", pulsar.ErrInvalidOptions), true, false},
		{fmt.Errorf("seeking: %w: p-0: %w", pulsar.ErrSeekNotReady, context.DeadlineExceeded), false, true},
		{fmt.Errorf("seeking: %w", pulsar.ErrConnectionClosed), false, true},
		{fmt.Errorf("seeking: %w", &pulsar.ServerError{Code: pulsar.CodeAuthorization, Message: "no"}), false, false},
	} {
		got := seekError(c.err)
		if errors.Is(got, egress.ErrBadPosition) != c.bad || errors.Is(got, egress.ErrUnavailable) != c.unavail || !errors.Is(got, c.err) {
			t.Errorf("%v: classified %v; want bad position %v, unavailable %v, the cause kept", c.err, got, c.bad, c.unavail)
		}
	}
	if seekError(nil) != nil {
		t.Error("no error classified as one")
	}
	// An id the client cannot have written is refused before anything is sent.
	s := &subscription{}
	if err := s.SeekID(context.Background(), "", "1:2:3"); !errors.Is(err, egress.ErrBadPosition) {
		t.Errorf("SeekID of a malformed id: %v, want ErrBadPosition", err)
	}
}
