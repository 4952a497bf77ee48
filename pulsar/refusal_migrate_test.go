package pulsar_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestAProducerMigratedWhileReadingAnswersAfterARefusalLosesAndDuplicatesNothing: the
// broker refused the first of four entries as corrupt, stored the second and lost the
// last two, and the topic migrates to another broker while the producer waits for their
// answers. The entry known stored stays where it is and is reported with the id it was
// stored under; the refused and the unanswered ones are sent to the new broker. Every
// message is reported sent and stored exactly once across the two brokers.
func TestAProducerMigratedWhileReadingAnswersAfterARefusalLosesAndDuplicatesNothing(t *testing.T) {
	const topic = "persistent://public/default/fault"
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("deduplication=%v", dedup), func(t *testing.T) {
			b1, b2 := fakeBroker(t), fakeBroker(t)
			b1.SetDeduplication(dedup)
			b2.SetDeduplication(dedup)
			p := producer(t, client(t, b1.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 8, BatchingMaxDelay: time.Hour})
			var mu sync.Mutex
			ignored := 0
			b1.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
				mu.Lock()
				defer mu.Unlock()
				if cmd.Cmd.GetType() == pulsartest.CommandSend && (bytes.Contains(cmd.Payload, []byte("m-00002")) || bytes.Contains(cmd.Payload, []byte("m-00003"))) {
					ignored++
					return pulsartest.Ignore() // never stored, never answered
				}
				return pulsartest.Pass()
			})
			b1.HoldReceipts(true)
			b1.CorruptNextSends(1)
			wait := sendEach(t, p, "m-00000", "m-00001", "m-00002", "m-00003")
			waitStored(t, b1, 1) // m-00001
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				mu.Lock()
				n := ignored
				mu.Unlock()
				if n == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("m-00002 and m-00003 did not reach the broker within 5 s")
				}
			}
			b1.ReleaseReceipts(2)              // the refusal of m-00000 and the receipt of m-00001
			time.Sleep(100 * time.Millisecond) // room for the client to read them; it waits for m-00002 and m-00003
			b1.Redirect(topic, b2.URL(), false)
			b1.MigrateProducers(b2.URL())
			b1.HoldReceipts(false)
			results := wait(10 * time.Second)
			stored := map[string]int{}
			for _, b := range []*pulsartest.Broker{b1, b2} {
				for _, m := range b.Messages(topic) {
					stored[string(m.Payload)]++
				}
			}
			for i, r := range results {
				name := fmt.Sprintf("m-%05d", i)
				switch {
				case r.err != nil:
					t.Fatalf("%s failed: %v", name, r.err)
				case stored[name] != 1:
					t.Fatalf("%s stored %d times across the two brokers, want once", name, stored[name])
				case r.id.Duplicate():
					t.Fatalf("%s reported with the duplicate id %v", name, r.id)
				}
			}
			if got := b1.Messages(topic); len(got) != 1 || string(got[0].Payload) != "m-00001" {
				t.Fatalf("the first broker holds %d messages, want m-00001 alone", len(got))
			}
			if m := b1.Messages(topic)[0]; results[1].id.LedgerID != int64(m.LedgerID) || results[1].id.EntryID != int64(m.EntryID) {
				t.Fatalf("m-00001 reported with %v, not the id the first broker stored it under", results[1].id)
			}
		})
	}
}
