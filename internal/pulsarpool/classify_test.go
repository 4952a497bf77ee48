package pulsarpool

import (
	"errors"
	"fmt"
	"testing"

	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/pulsar"
)

func TestFormatIDMatchesMessageIDString(t *testing.T) {
	for _, id := range []pulsar.MessageID{{LedgerID: 1, EntryID: 2, Partition: -1, BatchIndex: -1}, {LedgerID: 123456789, EntryID: 0, Partition: 7, BatchIndex: 999}} {
		if got := FormatID(id); got != id.String() {
			t.Errorf("formatID %q, String %q", got, id.String())
		}
	}
}

func TestClassifyChoosesTheIngressError(t *testing.T) {
	cases := []struct {
		err  error
		want error
	}{
		{pulsar.ErrSendTimeout, ingress.ErrUnavailable},
		{pulsar.ErrConnectionClosed, ingress.ErrUnavailable},
		{pulsar.ErrMessageTooLarge, ingress.ErrTooLarge},
		{pulsar.ErrProducerFailed, ingress.ErrRefused},
		// Refused as corrupt, overtaken: a new message may be sent (unnamed stream) ...
		{pulsar.ErrCorruptInTransit, ingress.ErrUnavailable},
		// ... but not under the caller's own sequence id (named stream): skip it by number.
		{fmt.Errorf("%w (%w)", pulsar.ErrCorruptInTransit, pulsar.ErrSequenceUsed), ingress.ErrRefused},
	}
	for _, c := range cases {
		if got := Classify(c.err); !errors.Is(got, c.want) || !errors.Is(got, c.err) {
			t.Errorf("%v: %v", c.err, got)
		}
	}
}
