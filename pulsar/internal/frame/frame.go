// Package frame encodes and decodes Pulsar binary-protocol frames. It is pure: no
// sockets, no goroutines, only byte slices.
//
// A simple command frame:
//
//	+-----------+-------------+----------------------+
//	| totalSize | commandSize | BaseCommand          |
//	| u32 BE    | u32 BE      | commandSize bytes    |
//	+-----------+-------------+----------------------+
//
// A payload frame (SEND from a producer, MESSAGE to a consumer):
//
//	+-----------+-------------+-------------+----------+----------+--------------+-----------------+---------+
//	| totalSize | commandSize | BaseCommand | 0x0e01   | crc32c   | metadataSize | MessageMetadata | payload |
//	| u32       | u32         |             | u16      | u32      | u32          |                 |         |
//	+-----------+-------------+-------------+----------+----------+--------------+-----------------+---------+
//
// totalSize counts every byte after itself. The CRC32-C (Castagnoli) covers
// metadataSize, metadata and payload: everything after the checksum field. A MESSAGE
// from the broker may carry broker entry metadata before the checksum magic:
// 0x0e02, a u32 size, then a BrokerEntryMetadata.
package frame

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/klauspost/crc32"
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/framepool"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

const (
	// MagicCRC32C starts the checksummed part of a payload frame.
	MagicCRC32C = 0x0e01
	// MagicBrokerEntryMetadata starts the broker entry metadata of a MESSAGE frame.
	MagicBrokerEntryMetadata = 0x0e02
	// DefaultMaxMessageSize applies until the broker's CONNECTED says otherwise.
	DefaultMaxMessageSize = 5 << 20
	// Padding is what a frame may exceed the message size limit by (command and metadata).
	Padding = 10 << 10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors, matched with errors.Is.
var (
	// ErrTooLarge: a frame above the size limit (sent or announced by the peer).
	ErrTooLarge = errors.New("pulsar frame too large")
	// ErrCorrupt: a frame whose sizes or contents do not parse.
	ErrCorrupt = errors.New("pulsar frame corrupt")
	// ErrChecksum: a payload whose CRC32-C does not match; the command itself is intact.
	ErrChecksum = errors.New("pulsar payload checksum mismatch")
)

// Frame is one decoded frame. Metadata and Payload alias the decoded buffer.
type Frame struct {
	Cmd *pb.BaseCommand
	// HasPayload is true for payload frames; the fields below are only set then.
	HasPayload bool
	// BrokerEntryMetadata is the raw broker entry metadata, if the broker sent any.
	BrokerEntryMetadata []byte
	// Metadata is the raw MessageMetadata.
	Metadata []byte
	// Payload is the message payload (possibly compressed, possibly a batch).
	Payload []byte
	// Buf is the pooled buffer the frame was read into, nil if it was allocated: the
	// one it is handed to may adopt it (see framepool), or leave it to the collector.
	Buf *framepool.Buf
}

// Checksum returns the CRC32-C of the given pieces, in order.
func Checksum(pieces ...[]byte) uint32 {
	var c uint32
	for _, p := range pieces {
		c = crc32.Update(c, castagnoli, p)
	}
	return c
}

// AppendCommand appends a simple command frame to dst.
func AppendCommand(dst []byte, cmd *pb.BaseCommand) ([]byte, error) {
	size := proto.Size(cmd)
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+size))
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, cmd)
}

// AppendPayloadCommand appends a payload frame carrying cmd, the marshaled
// MessageMetadata and the payload. maxFrame bounds the frame's totalSize (0: no bound).
func AppendPayloadCommand(dst []byte, cmd *pb.BaseCommand, metadata, payload []byte, maxFrame int) ([]byte, error) {
	cmdSize := proto.Size(cmd)
	total := 4 + cmdSize + 2 + 4 + 4 + len(metadata) + len(payload)
	if maxFrame > 0 && total > maxFrame {
		return dst, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, total, maxFrame)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(total))
	dst = binary.BigEndian.AppendUint32(dst, uint32(cmdSize))
	var err error
	dst, err = proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(dst, cmd)
	if err != nil {
		return dst, err
	}
	dst = binary.BigEndian.AppendUint16(dst, MagicCRC32C)
	crcAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	start := len(dst)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(metadata)))
	dst = append(dst, metadata...)
	dst = append(dst, payload...)
	binary.BigEndian.PutUint32(dst[crcAt:], Checksum(dst[start:]))
	return dst, nil
}

// ReadSize checks the 4-byte totalSize prefix of a frame against maxFrame and returns it.
// It recognises the usual wrong-port mistakes and says so.
func ReadSize(prefix [4]byte, maxFrame int) (int, error) {
	switch {
	case string(prefix[:]) == "HTTP":
		return 0, fmt.Errorf("%w: the peer answered with HTTP; is this the broker's web port instead of its binary port (6650)?", ErrCorrupt)
	case prefix[0] == 0x15 || (prefix[0] == 0x16 && prefix[1] == 0x03):
		return 0, fmt.Errorf("%w: the peer answered with TLS; use a pulsar+ssl:// URL for this port", ErrCorrupt)
	}
	n := binary.BigEndian.Uint32(prefix[:])
	if n < 4 {
		return 0, fmt.Errorf("%w: frame size %d is smaller than its command size field", ErrCorrupt, n)
	}
	if maxFrame > 0 && int64(n) > int64(maxFrame) {
		return 0, fmt.Errorf("%w: the peer announced a %d-byte frame, the limit is %d", ErrTooLarge, n, maxFrame)
	}
	return int(n), nil
}

// Decode parses one frame body (everything after totalSize). On ErrChecksum the
// returned frame still holds the command, so the caller can report the message.
func Decode(body []byte, f *Frame) error {
	*f = Frame{}
	if len(body) < 4 {
		return fmt.Errorf("%w: %d-byte frame has no command size", ErrCorrupt, len(body))
	}
	cmdSize := binary.BigEndian.Uint32(body)
	if uint64(cmdSize) > uint64(len(body)-4) {
		return fmt.Errorf("%w: command size %d exceeds the %d bytes left in the frame", ErrCorrupt, cmdSize, len(body)-4)
	}
	if cmd, ok := decodeSendReceipt(body[4 : 4+cmdSize]); ok {
		f.Cmd = cmd // a producer's answer to each entry: decoded in one allocation
	} else {
		cmd := &pb.BaseCommand{}
		if err := proto.Unmarshal(body[4:4+cmdSize], cmd); err != nil {
			return fmt.Errorf("%w: command: %v", ErrCorrupt, err)
		}
		f.Cmd = cmd
	}
	rest := body[4+cmdSize:]
	if len(rest) == 0 {
		return nil
	}
	f.HasPayload = true
	if len(rest) >= 2 && binary.BigEndian.Uint16(rest) == MagicBrokerEntryMetadata {
		if len(rest) < 6 {
			return fmt.Errorf("%w: truncated broker entry metadata", ErrCorrupt)
		}
		n := binary.BigEndian.Uint32(rest[2:])
		if uint64(n) > uint64(len(rest)-6) {
			return fmt.Errorf("%w: broker entry metadata size %d exceeds the frame", ErrCorrupt, n)
		}
		f.BrokerEntryMetadata = rest[6 : 6+n]
		rest = rest[6+n:]
	}
	if len(rest) < 10 || binary.BigEndian.Uint16(rest) != MagicCRC32C {
		return fmt.Errorf("%w: payload section without the 0x0e01 checksum magic", ErrCorrupt)
	}
	want := binary.BigEndian.Uint32(rest[2:])
	checked := rest[6:]
	mdSize := binary.BigEndian.Uint32(checked)
	if uint64(mdSize) > uint64(len(checked)-4) {
		return fmt.Errorf("%w: metadata size %d exceeds the %d bytes left", ErrCorrupt, mdSize, len(checked)-4)
	}
	f.Metadata = checked[4 : 4+mdSize]
	f.Payload = checked[4+mdSize:]
	if got := Checksum(checked); got != want {
		return fmt.Errorf("%w: computed %#08x, frame says %#08x", ErrChecksum, got, want)
	}
	return nil
}

// PayloadInPlace builds a payload frame around a payload that the caller wrote at
// buf[headroom:], writing the header into the headroom in front of it, so the payload
// is not copied again. The frame returned is a sub-slice of buf. When the header does
// not fit the headroom, the frame is built in a new buffer instead.
func PayloadInPlace(buf []byte, headroom int, cmd *pb.BaseCommand, metadata []byte, maxFrame int) ([]byte, error) {
	payload := buf[headroom:]
	cmdSize := proto.Size(cmd)
	header := 4 + 4 + cmdSize + 2 + 4 + 4 + len(metadata)
	if header > headroom {
		return AppendPayloadCommand(nil, cmd, metadata, payload, maxFrame)
	}
	total := header - 4 + len(payload)
	if maxFrame > 0 && total > maxFrame {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, total, maxFrame)
	}
	start := headroom - header
	f := buf[start:]
	h := f[:0]
	h = binary.BigEndian.AppendUint32(h, uint32(total))
	h = binary.BigEndian.AppendUint32(h, uint32(cmdSize))
	h, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(h, cmd)
	if err != nil {
		return nil, err
	}
	if len(h) != 8+cmdSize {
		return nil, fmt.Errorf("pulsar: command encoded to %d bytes, expected %d", len(h)-8, cmdSize)
	}
	h = binary.BigEndian.AppendUint16(h, MagicCRC32C)
	crcAt := len(h)
	h = append(h, 0, 0, 0, 0)
	checked := len(h)
	h = binary.BigEndian.AppendUint32(h, uint32(len(metadata)))
	h = append(h, metadata...)
	binary.BigEndian.PutUint32(f[crcAt:], Checksum(f[checked:]))
	return f, nil
}
