package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// The named-stream tests across bridge processes share this: two processes with one
// configuration, route r writing one partitioned topic of a new deduplicating namespace,
// and the stream s-1's numbered records.

// twoBridgesOnOneTopic creates a topic of partitions partitions in a new deduplicating
// namespace named for prefix and starts two bridge processes whose route r writes it;
// pulsarKeys are more keys under pulsar: ("" for none).
func twoBridgesOnOneTopic(t *testing.T, b *broker.Broker, prefix string, partitions int, pulsarKeys string) (topic string, a, bp *bridgeProc) {
	t.Helper()
	ns := dedupNamespace(t, b, prefix, true)
	topic = "persistent://" + ns + "/events"
	b.CreatePartitionedTopic(t, topic, partitions)
	if pulsarKeys != "" {
		pulsarKeys = "  " + pulsarKeys + "\n"
	}
	cfg := fmt.Sprintf("pulsar:\n  url: %s\n%sroutes:\n  - name: r\n    namespaces: [%s]\n    default: {topic: %s}\n", b.URL, pulsarKeys, ns, topic)
	return topic, startBridge(t, cfg), startBridge(t, cfg)
}

// records are records from to to (rec), both included.
func records(from, to int) [][]byte {
	var out [][]byte
	for i := from; i <= to; i++ {
		out = append(out, rec(i))
	}
	return out
}

// streamAt is the header of a request of the stream s-1 whose first record is seq.
func streamAt(seq int) map[string]string {
	return map[string]string{"Stream-Name": "s-1", "Stream-Sequence": strconv.Itoa(seq)}
}

// wantReceipts reads the receipts of records from to from+n-1, each 200 and naming its
// sequence, from s (on the process where).
func (s *ingressStream) wantReceipts(t *testing.T, where string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		select {
		case r := <-s.receipts:
			if r.Status != 200 || r.Sequence == nil || *r.Sequence != int64(i) {
				t.Fatalf("receipt %d on %s: %+v", i, where, r)
			}
		case <-time.After(time.Minute):
			t.Fatalf("receipt %d on %s did not come", i, where)
		}
	}
}
