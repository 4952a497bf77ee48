package pulsar_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestABatchsGroupedAcksSayWhatWasAcknowledged: a batch's messages acknowledged in one
// group share their entry's one id, its ack set brought up to date in place. Acks, a
// nack, groups sent between them (each completed by an ack of a lone entry), the batch
// delivered again after a reconnect with the broker's ack set: each ACK the broker gets
// must name as acknowledged exactly the batch's messages acknowledged so far, never one
// that was not (with BatchIndexAck), or nothing of the batch until all of it is (without).
func TestABatchsGroupedAcksSayWhatWasAcknowledged(t *testing.T) {
	for _, indexAcks := range []bool{true, false} {
		t.Run(fmt.Sprintf("BatchIndexAck=%v", indexAcks), func(t *testing.T) {
			testBatchGroupedAcks(t, indexAcks)
		})
	}
}

func testBatchGroupedAcks(t *testing.T, indexAcks bool) {
	b := fakeBroker(t)
	// A group is sent once it names two entries: the batch's (with BatchIndexAck) and a
	// lone one; without, the batch is named only once all of it is acknowledged.
	groupMax := 2
	if !indexAcks {
		groupMax = 1
	}
	cons := subscribe(t, client(t, b.URL()), pulsar.ConsumerOptions{Type: pulsar.Shared, AckGroupTime: time.Hour, AckGroupMax: groupMax,
		BatchIndexAck: indexAcks, NackRedeliveryDelay: time.Hour})
	const ledger, entry = 7, 1
	batch := batchOf("a0", "a1", "a2", "a3", "a4", "a5")
	batch.LedgerID, batch.EntryID = ledger, entry
	out := []pulsartest.Outgoing{batch}
	for i := range 4 {
		s := single(fmt.Sprintf("s%d", i))
		s.LedgerID, s.EntryID = ledger, uint64(entry+1+i)
		out = append(out, s)
	}
	b.Deliver(faultTopic, out...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[string]*pulsar.Message{}
	receive := func(n int) {
		for range n {
			m, err := cons.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got[string(m.Payload())] = m
		}
	}
	receive(len(out) - 1 + 6)
	acked := map[int]bool{}
	ack := func(payload string) {
		if err := cons.Ack(got[payload]); err != nil {
			t.Fatal(err)
		}
		if payload[0] == 'a' {
			acked[int(payload[1]-'0')] = true
		}
	}
	seen := 0
	// group sends the open group by acknowledging a lone entry, and checks what the
	// broker was told of the batch.
	group := func(lone string) {
		t.Helper()
		ack(lone)
		loneID := got[lone].ID
		var acks []pulsartest.AckRecord
		deadline := time.Now().Add(5 * time.Second)
	wait:
		for time.Now().Before(deadline) {
			acks = b.Acks(faultTopic)
			for _, a := range acks[seen:] {
				for _, id := range a.IDs {
					if id.GetLedgerId() == uint64(loneID.LedgerID) && id.GetEntryId() == uint64(loneID.EntryID) {
						break wait
					}
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		if len(acks) == seen {
			t.Fatalf("after acknowledging %s: no ACK", lone)
		}
		var ids []*pulsartest.MessageIDData
		for _, a := range acks[seen:] {
			ids = append(ids, a.IDs...)
		}
		seen = len(acks)
		all := len(acked) == 6
		var told []int
		named := false
		for _, id := range ids {
			if id.GetLedgerId() != ledger || id.GetEntryId() != entry {
				continue
			}
			named = true
			set := id.GetAckSet()
			for i := range 6 {
				if len(set) == 0 || set[0]&(1<<i) == 0 {
					told = append(told, i) // cleared: acknowledged
				}
			}
			if len(set) > 0 && id.GetBatchSize() != 6 {
				t.Errorf("after %s: the batch's ack set with batch size %d, want 6", lone, id.GetBatchSize())
			}
		}
		var want []int
		for i := range 6 {
			if acked[i] {
				want = append(want, i)
			}
		}
		switch {
		case !indexAcks && !all:
			if named {
				t.Fatalf("after %s: the broker was told of the batch (%v acknowledged) before all of it was, without BatchIndexAck", lone, told)
			}
		case len(want) == 0:
			if named {
				t.Fatalf("after %s: the batch named (%v) with none of it acknowledged", lone, told)
			}
		default:
			if fmt.Sprint(told) != fmt.Sprint(want) {
				t.Fatalf("after %s: the broker was told %v of the batch acknowledged, want %v", lone, told, want)
			}
		}
	}
	ack("a0")
	ack("a2")
	group("s0")
	ack("a3")
	cons.Nack(got["a1"])
	ack("a4")
	group("s1")
	// The connection goes; the broker delivers the batch again with its own ack set (what
	// it was told, with BatchIndexAck; nothing without).
	b.DropConnections()
	again := batchOf("a0", "a1", "a2", "a3", "a4", "a5")
	again.LedgerID, again.EntryID = ledger, entry
	if indexAcks {
		var set int64
		for i := range 6 {
			if !acked[i] {
				set |= 1 << i
			}
		}
		again.AckSet = []int64{set}
	}
	deadline := time.Now().Add(5 * time.Second)
	for b.Frames(pulsartest.CommandSubscribe) < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	b.Deliver(faultTopic, again)
	n := 6
	if indexAcks {
		n = 2 // a1 and a5
	}
	receive(n)
	ack("a5")
	group("s2")
	ack("a1")
	if !indexAcks {
		for _, p := range []string{"a0", "a2", "a3", "a4"} {
			ack(p)
		}
	}
	group("s3")
}
