package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// metricValue is the value of the exposition line that starts with series (a name and,
// if any, its labels exactly as exposed). A missing series fails the test: read as zero it
// would let a renamed or absent metric pass every bound.
func metricValue(t testing.TB, body, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, series+" ") {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			return v
		}
	}
	t.Fatalf("/metrics has no series %s", series)
	return 0
}

// TestEgressSlowClientHoldsOnlyTheReceiverQueueBytes: a slow client of a stream of
// large messages (200 KiB each, thousands of them, over two partitions) holds at most
// receiverQueueBytes (the default 1 MiB) plus one message per partition in the bridge's
// consumer, not receiverQueue (1 000) messages per partition; the memory budget on
// /metrics counts those queues, and returns to its baseline once the stream ends.
func TestEgressSlowClientHoldsOnlyTheReceiverQueueBytes(t *testing.T) {
	slowClientOfLargeMessages(t, 2, 0)
}

// TestEgressConsumerQueuesStayInsideTheMemoryBudget: the same slow client with four
// partitions (4 MiB of receiverQueueBytes) under memory.budget 1MiB: the consumer's
// queues are charged to the budget and stop at it (plus one message per partition the
// budget lets an idle partition have), and the messages still flow.
func TestEgressConsumerQueuesStayInsideTheMemoryBudget(t *testing.T) {
	slowClientOfLargeMessages(t, 4, 1<<20)
}

func slowClientOfLargeMessages(t *testing.T, partitions int, budget int) {
	b := broker.Get(t)
	topic := b.Topic(t, "big")
	const (
		n          = 3000
		pad        = 200 << 10
		queueBytes = 1 << 20 // the default streams[].receiverQueueBytes
	)
	b.CreatePartitionedTopic(t, topic, partitions)
	payloads := publishOfficial(t, b, topic, n, 8, pad)
	size := len(payloads[n-1]) // the largest: its seq has the most digits
	memory := ""
	if budget > 0 {
		memory = fmt.Sprintf("memory:\n  budget: %d\n", budget)
	}
	p := startBridge(t, fmt.Sprintf(`%s
pulsar:
  url: %s
egress:
  writeTimeout: 5m
streams:
  - name: big
    topics: [%s]
    position: earliest
`, memory, b.URL, topic))
	const (
		used     = "bridge_memory_budget_used_bytes"
		queues   = `bridge_memory_budget_charged_bytes{user="consumer_queues"}`
		egressed = `bridge_memory_budget_charged_bytes{user="egress"}`
		buffered = "bridge_egress_buffered_messages"
	)
	baseline := metricValue(t, scrape(t, p.OpsURL), used)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/big", nil)
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body, recordio.BufferSize(size+100))
	var maxBuffered, maxQueues, maxUsed, maxEgress float64
	rss := processRSS(t, p.cmd.Process.Pid)
	const reads = 40
	for i := range reads {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		// The slow client: between reads the bridge fills what it may (its consumer's
		// queues, the socket buffers) and stops.
		time.Sleep(250 * time.Millisecond)
		m := scrape(t, p.OpsURL)
		buf, q, u, e := metricValue(t, m, buffered), metricValue(t, m, queues), metricValue(t, m, used), metricValue(t, m, egressed)
		maxBuffered, maxQueues, maxUsed, maxEgress = max(maxBuffered, buf), max(maxQueues, q), max(maxUsed, u), max(maxEgress, e)
		// The consumer holds at most receiverQueueBytes plus one message per partition.
		if buf > float64(partitions)*(queueBytes/float64(size)+1) || q > float64(partitions)*(queueBytes+float64(size)) {
			t.Fatalf("after %d reads the consumer holds %.0f messages, %.0f bytes charged; bound %d partitions x (%d bytes + one %d-byte message)",
				i+1, buf, q, partitions, queueBytes, size)
		}
		// Under a smaller budget, the queues stay inside it: the budget plus what the
		// idle partitions and the stream may take beyond it (a message each).
		if limit := float64(budget) + float64(partitions+1)*float64(size); budget > 0 && (u > limit || buf*float64(size) > limit) {
			t.Fatalf("after %d reads under memory.budget %d: %.0f bytes used, %.0f messages queued (%.0f bytes): more than the budget and %d messages",
				i+1, budget, u, buf, buf*float64(size), partitions+1)
		}
		// The budget counts them: the queue's charge is its messages' bytes.
		if d := q - buf*float64(size); d > float64(size) || d < -float64(buf*float64(size)/100)-float64(size) {
			t.Fatalf("after %d reads: %.0f bytes charged for %.0f queued messages of about %d bytes", i+1, q, buf, size)
		}
		if u < q+e {
			t.Fatalf("after %d reads the budget's used bytes %.0f are less than its users' %.0f + %.0f", i+1, u, q, e)
		}
	}
	rss = max(rss, processRSS(t, p.cmd.Process.Pid))
	if maxQueues < queueBytes/2 {
		t.Fatalf("the consumer's queues never held more than %.0f bytes: the slow client did not fill them", maxQueues)
	}
	cancel()
	resp.Body.Close()
	// The stream ends: its subscription closes and what it held goes back.
	deadline := time.Now().Add(30 * time.Second)
	var after float64
	for {
		m := scrape(t, p.OpsURL)
		after = metricValue(t, m, used)
		if after == baseline && metricValue(t, m, queues) == 0 && metricValue(t, m, egressed) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the stream ended the budget counts %.0f bytes (baseline %.0f): %s", after, baseline,
				grepLines(m, "bridge_memory_budget"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d messages of %d bytes over %d partitions, memory.budget %d (0: default), slow client (%d reads): consumer held at most %.0f messages / %.0f bytes (bound %d x (%d + %d)); budget used at most %.0f bytes (egress %.0f), back to %.0f (baseline %.0f) after the stream; bridge RSS at most %d MiB",
		n, size, partitions, budget, reads, maxBuffered, maxQueues, partitions, queueBytes, size, maxUsed, maxEgress, after, baseline, rss>>20)
}
