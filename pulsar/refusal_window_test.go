package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestEveryRefusalInTheWindowIsReadBeforeResending: with four entries in flight, the
// first two refused as corrupt (ChecksumError) and the two behind them stored, the
// second refusal reaches the client after it has read the first. The producer must read
// it (and the receipts behind it) before it resets the connection and resends: resent
// unmarked, the second entry would be answered as a duplicate on a deduplicating topic,
// the later entries being stored, and reported sent though never stored. The stored
// entries are not sent again (a topic without deduplication would store them twice) and
// are reported with the ids they were stored under.
func TestEveryRefusalInTheWindowIsReadBeforeResending(t *testing.T) {
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("deduplication=%v", dedup), func(t *testing.T) {
			b := fakeBroker(t)
			b.SetDeduplication(dedup)
			// Each message leaves at once as an entry of its own: fewer than 8 are in flight.
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 8, BatchingMaxDelay: time.Hour})
			b.HoldReceipts(true)
			b.CorruptNextSends(2)
			type result struct {
				id  pulsar.MessageID
				err error
			}
			const n = 4
			results := make([]result, n)
			var wg sync.WaitGroup
			wg.Add(n)
			for i := range n {
				p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(fmt.Sprintf("m-%05d", i))}, func(id pulsar.MessageID, err error) {
					results[i] = result{id, err}
					wg.Done()
				})
			}
			// The broker read the four entries in order once the last two are stored: both
			// refusals and both receipts are held, in order.
			for deadline := time.Now().Add(5 * time.Second); len(b.Messages("persistent://public/default/fault")) < 2; {
				if time.Now().After(deadline) {
					t.Fatal("the two uncorrupted entries were not stored within 5 s")
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.ReleaseReceipts(1)               // the first refusal
			time.Sleep(100 * time.Millisecond) // room for the client to act on it alone
			b.HoldReceipts(false)              // the second refusal, then the two receipts
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("not every message was settled within 20 s")
			}
			stored := map[string]int{}
			for _, m := range b.Messages("persistent://public/default/fault") {
				stored[string(m.Payload)]++
			}
			for i, r := range results {
				name := fmt.Sprintf("m-%05d", i)
				switch {
				case r.err != nil && (!dedup || !errors.Is(r.err, pulsar.ErrCorruptInTransit)):
					t.Fatalf("%s failed: %v", name, r.err)
				case r.err != nil && stored[name] != 0:
					t.Fatalf("%s failed with %v but is stored", name, r.err)
				case r.err == nil && stored[name] == 0:
					t.Fatalf("%s was reported sent (id %v) but the broker does not hold it", name, r.id)
				case stored[name] > 1:
					t.Fatalf("%s stored %d times: an entry the broker had stored was sent again", name, stored[name])
				case r.err == nil && r.id.Duplicate():
					t.Fatalf("%s reported with the duplicate id %v, not the one it was stored under", name, r.id)
				}
			}
			if dedup && (results[0].err == nil || results[1].err == nil) {
				t.Fatalf("the refused entries were reported sent (%v, %v), though later ones were stored before their resends", results[0].err, results[1].err)
			}
		})
	}
}

// sendEach sends the messages one by one without waiting and returns a function that
// waits (up to limit) for their results, by index.
func sendEach(t *testing.T, p *pulsar.Producer, payloads ...string) func(limit time.Duration) []sendResult {
	t.Helper()
	results := make([]sendResult, len(payloads))
	var wg sync.WaitGroup
	wg.Add(len(payloads))
	for i, payload := range payloads {
		p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(payload)}, func(id pulsar.MessageID, err error) {
			results[i] = sendResult{id, err}
			wg.Done()
		})
	}
	return func(limit time.Duration) []sendResult {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(limit):
			t.Fatalf("not every message was settled within %s", limit)
		}
		return results
	}
}

type sendResult struct {
	id  pulsar.MessageID
	err error
}

// waitStored waits until the broker holds n messages on the fault topic.
func waitStored(t *testing.T, b *pulsartest.Broker, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); len(b.Messages("persistent://public/default/fault")) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("the broker does not hold %d messages within 5 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestARefusalIsResentWhenTheBrokerStopsAnsweringBehindIt: after a refusal the producer
// reads the answers to the entries written behind it, but a broker that never answers
// one cannot hold it: after the operation timeout the connection is reset anyway and
// both are resent and stored.
func TestARefusalIsResentWhenTheBrokerStopsAnsweringBehindIt(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.OperationTimeout = 500 * time.Millisecond })
	p := producer(t, c, pulsar.ProducerOptions{BatchingMaxInFlight: 8, BatchingMaxDelay: time.Hour})
	var mu sync.Mutex
	ignored := false
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		mu.Lock()
		defer mu.Unlock()
		if cmd.Cmd.GetType() == pulsartest.CommandSend && !ignored && bytes.Contains(cmd.Payload, []byte("m-00001")) {
			ignored = true
			return pulsartest.Ignore() // never answered, never stored
		}
		return pulsartest.Pass()
	})
	b.HoldReceipts(true) // the refusal of m-00000 waits until m-00001 was written
	b.CorruptNextSends(1)
	wait := sendEach(t, p, "m-00000", "m-00001")
	for deadline := time.Now().Add(5 * time.Second); b.Frames(pulsartest.CommandSend) < 1; {
		if time.Now().After(deadline) {
			t.Fatal("m-00001 did not reach the broker within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.HoldReceipts(false)
	for i, r := range wait(10 * time.Second) {
		if r.err != nil {
			t.Fatalf("m-%05d: %v", i, r.err)
		}
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 2)
}

// TestAProducerClosedWhileReadingAnswersAfterARefusalReportsWhatWasStored: closed while
// it reads the answers behind a refused entry, the producer reports the entry the broker
// stored behind the refused one as sent, with the id it was stored under, and fails the
// refused one.
func TestAProducerClosedWhileReadingAnswersAfterARefusalReportsWhatWasStored(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{BatchingMaxInFlight: 8, BatchingMaxDelay: time.Hour})
	b.HoldReceipts(true)
	b.CorruptNextSends(1)
	wait := sendEach(t, p, "m-00000", "m-00001", "m-00002")
	waitStored(t, b, 2)
	b.ReleaseReceipts(2)               // the refusal of m-00000 and the receipt of m-00001
	time.Sleep(100 * time.Millisecond) // room for the client to read them
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = p.CloseContext(ctx)
	results := wait(10 * time.Second)
	if r := results[1]; r.err != nil || r.id.Duplicate() {
		t.Fatalf("m-00001, stored behind the refused entry, reported (%v, %v); want sent with the id it was stored under", r.id, r.err)
	}
	if results[0].err == nil {
		t.Fatalf("m-00000, refused and never stored, was reported sent (%v)", results[0].id)
	}
	b.HoldReceipts(false)
}

// TestAChunkRefusedAfterLaterChunksWereStoredFailsItsMessage: a chunk refused as corrupt
// while the next chunk of its message was stored cannot be resent (it would be stored
// after that chunk, and no consumer assembles chunks out of order): the message fails.
func TestAChunkRefusedAfterLaterChunksWereStoredFailsItsMessage(t *testing.T) {
	b := fakeBroker(t)
	b.SetDeduplication(true)
	b.SetMaxMessageSize(2 << 10)
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
	var mu sync.Mutex
	refused := false
	b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
		mu.Lock()
		defer mu.Unlock()
		md := &pb.MessageMetadata{}
		if cmd.Cmd.GetType() != pulsartest.CommandSend || refused || proto.Unmarshal(cmd.Metadata, md) != nil || md.GetChunkId() != 1 {
			return pulsartest.Pass()
		}
		refused = true
		return pulsartest.Refuse(pb.ServerError_ChecksumError, "checksum mismatch")
	})
	b.HoldReceipts(true) // every answer waits until the three chunks were written
	big := bytes.Repeat([]byte("x"), 4<<10)
	done := make(chan error, 1)
	p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: big}, func(_ pulsar.MessageID, err error) { done <- err })
	for deadline := time.Now().Add(5 * time.Second); b.Frames(pulsartest.CommandSend) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d chunks reached the broker within 5 s, want 3", b.Frames(pulsartest.CommandSend))
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.HoldReceipts(false)
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the chunked message was not settled within 10 s")
	}
	var chunks []int
	for _, m := range b.Messages("persistent://public/default/fault") {
		chunks = append(chunks, m.Chunk)
	}
	if err == nil {
		t.Fatalf("the message was reported sent, but the broker holds its chunks in the order %v", chunks)
	}
	if !errors.Is(err, pulsar.ErrCorruptInTransit) {
		t.Fatalf("err = %v, want ErrCorruptInTransit", err)
	}
}
