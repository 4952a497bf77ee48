package pulsarpool

import (
	"testing"

	"github.com/recordio-bridge/bridge/pulsar"
)

// TestJavaIDIsTheJavaClientsForm: ORIGIN_MESSAGE_ID is written as the Java client's
// MessageId.toString, so tools reading its dead-letter topics parse the bridge's.
func TestJavaIDIsTheJavaClientsForm(t *testing.T) {
	for want, id := range map[string]pulsar.MessageID{
		"7:42:-1":  {LedgerID: 7, EntryID: 42, Partition: -1, BatchIndex: -1},
		"7:42:3":   {LedgerID: 7, EntryID: 42, Partition: 3, BatchIndex: -1},
		"7:42:3:5": {LedgerID: 7, EntryID: 42, Partition: 3, BatchIndex: 5, BatchSize: 10},
	} {
		if got := javaID(id); got != want {
			t.Errorf("%+v: %q, want %q", id, got, want)
		}
	}
}
