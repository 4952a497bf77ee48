package e2e

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	official "github.com/apache/pulsar-client-go/pulsar"
	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
)

// dedupNamespace is a fresh namespace with deduplication on (or off) and infinite
// retention: without a subscription, a broker restart plus the deduplication snapshot may
// otherwise delete early ledgers, which looks like a loss that is not the bridge's.
func dedupNamespace(t testing.TB, b *broker.Broker, prefix string, dedup bool) string {
	t.Helper()
	ns := b.Namespace(t, prefix)
	b.SetDeduplication(t, ns, dedup)
	b.MustAdmin(t, "POST", "/admin/v2/namespaces/"+ns+"/retention", []byte(`{"retentionTimeInMinutes":-1,"retentionSizeInMB":-1}`))
	return ns
}

// readAll reads every message of topic (partitioned or not) from the start with the
// official client, until none arrives for quiet.
func readAll(t testing.TB, c official.Client, topic string, quiet time.Duration) []official.Message {
	t.Helper()
	cons := officialSubscribe(t, c, topic)
	var out []official.Message
	for {
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		msg, err := cons.Receive(ctx)
		cancel()
		if err != nil {
			return out
		}
		out = append(out, msg)
		_ = cons.Ack(msg)
	}
}

// On the real broker: a producer taking over a name must not batch a resent sequence id
// with newer ones. The broker judges an entry by its first id, so a batch [5..20] after
// 0..9 were persisted is dropped whole, and 10..20 would be lost while answered as
// duplicates.
func TestDeduplicatingProducerTakingOverANameLosesNothing(t *testing.T) {
	b := broker.Get(t)
	ns := dedupNamespace(t, b, "dedup-takeover", true)
	topic := "persistent://" + ns + "/t"
	c := newOurClient(t, b)
	opts := pulsar.ProducerOptions{Topic: topic, Name: "takeover", Deduplication: true, BatchingMaxDelay: 200 * time.Millisecond}
	send := func(p *pulsar.Producer, from, to int64) []pulsar.MessageID {
		ids := make([]pulsar.MessageID, to-from+1)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for s := from; s <= to; s++ {
			wg.Add(1)
			seq := s
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: []byte(strconv.FormatInt(seq, 10)), SequenceID: &seq}, func(id pulsar.MessageID, err error) {
				mu.Lock()
				ids[seq-from] = id
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				wg.Done()
			})
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		return ids
	}
	first, err := c.CreateProducer(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	send(first, 0, 9)
	first.Close()
	second, err := c.CreateProducer(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	ids := send(second, 5, 20)
	for i, id := range ids {
		if seq := int64(i) + 5; id.Duplicate() != (seq <= 9) {
			t.Errorf("sequence %d: duplicate = %v", seq, id.Duplicate())
		}
	}
	msgs := readAll(t, newOfficialClient(t, b), topic, 3*time.Second)
	if len(msgs) != 21 {
		t.Fatalf("topic holds %d messages, want 21", len(msgs))
	}
	for i, m := range msgs {
		if string(m.Payload()) != strconv.Itoa(i) {
			t.Fatalf("message %d is %q", i, m.Payload())
		}
	}
}

// A named stream resent from the middle lands once; the same without deduplication on
// the namespace lands twice, and no receipt says duplicate (what a user gets when it is off).
func TestNamedStreamResentFromTheMiddle(t *testing.T) {
	b := broker.Get(t)
	for _, dedup := range []bool{true, false} {
		t.Run("dedup="+strconv.FormatBool(dedup), func(t *testing.T) {
			ns := dedupNamespace(t, b, "named", dedup)
			topic := "persistent://" + ns + "/events"
			p := startBridge(t, fmt.Sprintf("pulsar:\n  url: %s\nroutes:\n  - name: r\n    namespaces: [%s]\n    default: {topic: %s}\n", b.URL, ns, topic))
			post := func(from, to int) (dups int) {
				st := openStream(t, h1Client, p.DataURL+"/v1/publish/r", map[string]string{"Stream-Name": "s-1", "Stream-Sequence": strconv.Itoa(from)})
				var recs [][]byte
				for i := from; i <= to; i++ {
					recs = append(recs, []byte(fmt.Sprintf(`{"n":%d}`, i)))
				}
				if err := st.send(recs...); err != nil {
					t.Fatal(err)
				}
				rs, sum, err := st.finish(time.Minute)
				if err != nil || sum.Status != 200 || len(rs) != to-from+1 {
					t.Fatalf("%v: summary %+v, %d receipts", err, sum, len(rs))
				}
				for i, r := range rs {
					if r.Sequence == nil || *r.Sequence != int64(from+i) {
						t.Fatalf("receipt %d: %+v, want sequence %d", i, r, from+i)
					}
					if r.Duplicate {
						dups++
						if r.MessageID != "" {
							t.Fatalf("duplicate receipt %d with a message id: %+v", i, r)
						}
					}
				}
				if sum.ResumeSequence == nil || *sum.ResumeSequence != int64(to+1) || sum.Duplicates == nil || *sum.Duplicates != int64(dups) {
					t.Fatalf("summary %+v: want resumeSequence %d and %d duplicates", sum, to+1, dups)
				}
				return dups
			}
			if d := post(0, 99); d != 0 {
				t.Fatalf("first request: %d duplicates", d)
			}
			d := post(50, 149)
			msgs := readAll(t, newOfficialClient(t, b), topic, 3*time.Second)
			if dedup {
				if d != 50 || len(msgs) != 150 {
					t.Fatalf("deduplication on: %d duplicates answered, %d messages stored; want 50 and 150", d, len(msgs))
				}
				for i, m := range msgs {
					if want := fmt.Sprintf(`{"n":%d}`, i); string(m.Payload()) != want {
						t.Fatalf("message %d is %s, want %s", i, m.Payload(), want)
					}
				}
			} else if d != 0 || len(msgs) != 200 {
				t.Fatalf("deduplication off: %d duplicates answered, %d messages stored; want 0 and 200", d, len(msgs))
			}
			t.Logf("deduplication %v: the resent half was answered with %d duplicate receipts; the topic holds %d messages", dedup, d, len(msgs))
		})
	}
}
