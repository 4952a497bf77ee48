package pulsar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// MessageID identifies a message in a topic: the ledger and entry that hold it, its
// partition (-1 for a non-partitioned topic) and its index inside a batch (-1 if not batched).
type MessageID struct {
	LedgerID   int64
	EntryID    int64
	Partition  int32
	BatchIndex int32
	BatchSize  int32
}

// String renders the id as ledger:entry:partition:batchIndex, the form Parse reads.
func (id MessageID) String() string {
	return fmt.Sprintf("%d:%d:%d:%d", id.LedgerID, id.EntryID, id.Partition, id.BatchIndex)
}

// Duplicate reports whether the broker answered the message as one it had already
// persisted from the same producer name (deduplication): it stored nothing new, and
// the id (-1:-1) names no message.
func (id MessageID) Duplicate() bool { return id.LedgerID == -1 && id.EntryID == -1 }

// ErrInvalidMessageID: a string that is not ledger:entry:partition:batchIndex.
var ErrInvalidMessageID = errors.New("pulsar: invalid message id")

// ParseMessageID reads the form String writes. The partition and the batch index are
// int32 on the wire and -1 when absent: anything outside [-1, 2^31) is refused rather
// than truncated into another message's id.
func ParseMessageID(s string) (MessageID, error) {
	parts := strings.SplitN(s, ":", 5)
	if len(parts) != 4 {
		return MessageID{}, fmt.Errorf("%w: %.64q: want ledger:entry:partition:batchIndex", ErrInvalidMessageID, s)
	}
	var v [4]int64
	for i, p := range parts {
		bits := 64
		if i >= 2 {
			bits = 32
		}
		n, err := strconv.ParseInt(p, 10, bits)
		if err == nil && i >= 2 && n < -1 {
			err = fmt.Errorf("%d is below -1", n)
		}
		if err != nil {
			return MessageID{}, fmt.Errorf("%w: %.64q: part %d: %v", ErrInvalidMessageID, s, i+1, err)
		}
		v[i] = n
	}
	return MessageID{LedgerID: v[0], EntryID: v[1], Partition: int32(v[2]), BatchIndex: int32(v[3])}, nil
}

func messageIDFromPB(m *pb.MessageIdData, partition int32) MessageID {
	return MessageID{
		LedgerID:   int64(m.GetLedgerId()),
		EntryID:    int64(m.GetEntryId()),
		Partition:  partition,
		BatchIndex: m.GetBatchIndex(),
		BatchSize:  m.GetBatchSize(),
	}
}
