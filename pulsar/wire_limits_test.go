package pulsar_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestTooLargeRefusalDoesNotRaceAReconnect: refusing a message above the broker's
// limit read the limit without the lock a reconnect writes it under (a data race the
// -race suite reports).
func TestTooLargeRefusalDoesNotRaceAReconnect(t *testing.T) {
	b := fakeBroker(t)
	b.SetMaxMessageSize(16 << 10)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{DisableChunking: true})
	big := &pulsar.ProducerMessage{Payload: make([]byte, 32<<10)}
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := p.Send(context.Background(), big); !errors.Is(err, pulsar.ErrMessageTooLarge) {
				done <- err
				return
			}
		}
	}()
	for want := 1; want <= 20; want++ {
		b.DropConnections()
		// Reconnected once a send goes through again.
		if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("small")}); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("a message above the limit: %v, want ErrMessageTooLarge", err)
	}
	if b.Frames(pb.BaseCommand_CONNECT) < 2 {
		t.Fatal("no reconnect happened")
	}
}

type unreadable struct{}

func (unreadable) Read([]byte) (int, error) { return 0, errors.New("the payload must not be read") }

// TestChunkedMessageSizesAreNotTruncated: total_chunk_msg_size is an int32 on the
// wire; a message of 2 GiB or more used to be announced with a truncated size.
func TestChunkedMessageSizesAreNotTruncated(t *testing.T) {
	b := fakeBroker(t)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{MaxChunkedMessageSize: 1 << 40})
	for _, size := range []int64{math.MaxInt32 + 1, 1 << 32, 1<<32 + 5} {
		_, err := p.SendStream(context.Background(), &pulsar.ProducerMessage{}, size, unreadable{})
		if !errors.Is(err, pulsar.ErrMessageTooLarge) {
			t.Fatalf("a %d-byte stream: %v, want ErrMessageTooLarge before reading", size, err)
		}
	}
	if n := len(b.Messages("persistent://public/default/fault")); n != 0 {
		t.Fatalf("%d chunks published", n)
	}
}

func TestParseMessageID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want pulsar.MessageID
		ok   bool
	}{
		{"7:42:-1:-1", pulsar.MessageID{LedgerID: 7, EntryID: 42, Partition: -1, BatchIndex: -1}, true},
		{"7:42:3:9", pulsar.MessageID{LedgerID: 7, EntryID: 42, Partition: 3, BatchIndex: 9}, true},
		{"-1:-1:-1:-1", pulsar.MessageID{LedgerID: -1, EntryID: -1, Partition: -1, BatchIndex: -1}, true},
		{"7:42:2147483647:0", pulsar.MessageID{LedgerID: 7, EntryID: 42, Partition: math.MaxInt32}, true},
		// Each used to parse, truncated into another message's id (partition 0, index 1, ...).
		{"7:42:4294967296:0", pulsar.MessageID{}, false},
		{"7:42:0:4294967297", pulsar.MessageID{}, false},
		{"7:42:2147483648:0", pulsar.MessageID{}, false},
		{"7:42:-2:0", pulsar.MessageID{}, false},
		{"7:42:0:-5", pulsar.MessageID{}, false},
		{"7:42:0", pulsar.MessageID{}, false},
		{"7:42:0:0:0", pulsar.MessageID{}, false},
		{"7:x:0:0", pulsar.MessageID{}, false},
		{"9223372036854775808:0:0:0", pulsar.MessageID{}, false},
		{strings.Repeat(":", 1<<16), pulsar.MessageID{}, false},
	} {
		got, err := pulsar.ParseMessageID(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseMessageID(%.40q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, pulsar.ErrInvalidMessageID) {
			t.Errorf("ParseMessageID(%.40q): %v does not match ErrInvalidMessageID", tc.in, err)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("%q parsed and rendered as %q", tc.in, got.String())
		}
	}
}

// FuzzParseMessageID: whatever the string, parsing neither panics nor accepts an id
// that does not render back to the same (canonical) text's value.
func FuzzParseMessageID(f *testing.F) {
	for _, s := range []string{"7:42:-1:-1", "1:2:3:4", "-1:-1:-1:-1", "7:42:4294967296:0", "0:0:0:0:0", "+1:02:-0:0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := pulsar.ParseMessageID(s)
		if err != nil {
			if !errors.Is(err, pulsar.ErrInvalidMessageID) {
				t.Fatalf("%v does not match ErrInvalidMessageID", err)
			}
			return
		}
		if id.Partition < -1 || id.BatchIndex < -1 {
			t.Fatalf("%q parsed to %+v", s, id)
		}
		again, err := pulsar.ParseMessageID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, id, id.String(), again, err)
		}
	})
}
