package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestEgressDeadLettersWhileItsQueueSpendsTheBudget: under memory.budget 1 MiB a stream's
// own consumer queue and deliveries spend the budget; a /nack that dead-letters a message
// it holds is answered with the message dead-lettered. Before f720588 the dead letter
// waited for room only that stream could free, for the 30 s dead-letter timeout, and
// then failed (deadLettered 0: the message came back to do the same again).
func TestEgressDeadLettersWhileItsQueueSpendsTheBudget(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "dlqbudget")
	const (
		n      = 60
		pad    = 64 << 10
		budget = 1 << 20
	)
	payloads := publishOfficial(t, b, topic, n, 4, pad)
	size := len(payloads[n-1])
	p := startBridge(t, fmt.Sprintf(`
memory:
  budget: %d
pulsar:
  url: %s
egress:
  writeTimeout: 5m
streams:
  - name: out
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    retry: {initial: 1s, multiplier: 1.6, jitter: 0.2, max: 120s, maxDeliveries: 1}
`, budget, b.URL, topic))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body, recordio.BufferSize(size+100))
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	// The client reads no more: the stream and its queue fill the budget.
	const used = "bridge_memory_budget_used_bytes"
	deadline := time.Now().Add(30 * time.Second)
	for {
		u := metricValue(t, scrape(t, p.OpsURL), used)
		if budget-u < float64(size) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the budget never filled: %.0f of %d bytes used", u, budget)
		}
		time.Sleep(50 * time.Millisecond)
	}
	st, m := postAck(t, p.DataURL+"/v1/streams/out/nack", sid, "application/json", []byte(`[0]`))
	if st != 200 || m["deadLettered"] != float64(1) {
		t.Fatalf("POST /nack of the first record under a spent budget: %d %v; want it dead-lettered", st, m)
	}
}
