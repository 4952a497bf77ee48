package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestEgressAcksAnswered200SurviveAKilledReplica: bridge replicas serve one shared
// subscription (ack=client) of single messages and batches of 10; a client reads a few records from a replica, acknowledges
// them, and the replica is killed (SIGKILL) the moment the 200 arrives; another replica
// takes its place. A 200 means the broker has the acknowledgement (ack receipts), so no
// message acknowledged with a 200 is ever delivered again, while every message is
// delivered and the subscription's backlog ends at 0. (With acknowledgements answered
// once queued, ackReceipt: false, the group still waiting in the killed process was lost
// and those messages came back. On a broker without batch-index acknowledgements, which
// ignores the acknowledgement of part of a batch, a message of a batch not acknowledged
// whole can come back after its 200: docs/http-api.md.)
func TestEgressAcksAnswered200SurviveAKilledReplica(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "ack-receipts")
	const n, rounds, perRound = 300, 8, 25
	publishUnbatchedAsync(t, b, topic, n/2)
	publishBatched(t, b, topic, n/2, false) // in batches of 10: acknowledged by batch index
	cfg := fmt.Sprintf(`
pulsar:
  url: %s
streams:
  - name: out
    topics: [%s]
    subscription: receipts
    position: earliest
    type: shared
    ack: client
    envelope: json
    ackTimeout: 10m
    receiverQueue: 50
`, b.URL, topic)
	ackedAt := map[string]int{} // id -> the round whose /ack answered 200 for it
	seen := map[string]bool{}
	var again []string // ids delivered after a 200 acknowledged them
	// read takes records from a new stream on p until enough says so (or two minutes pass).
	read := func(p *bridgeProc, round int, enough func(ids []string) bool) (sid string, ids []string, stop func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
		if resp.StatusCode != http.StatusOK {
			cancel()
			t.Fatalf("round %d: GET %d", round, resp.StatusCode)
		}
		rd := recordio.NewReader(resp.Body)
		for !enough(ids) {
			rec, err := rd.Next()
			if err != nil {
				cancel()
				t.Fatalf("round %d, after %d records (%d of %d messages seen): %v", round, len(ids), len(seen), n, err)
			}
			var e struct {
				MessageID string `json:"messageId"`
			}
			if err := json.Unmarshal(rec, &e); err != nil {
				t.Fatalf("%q: %v", rec, err)
			}
			if r, ok := ackedAt[e.MessageID]; ok {
				again = append(again, fmt.Sprintf("%s (acknowledged with a 200 in round %d, delivered again in round %d)", e.MessageID, r, round))
			}
			seen[e.MessageID] = true
			ids = append(ids, e.MessageID)
		}
		return resp.Header.Get("Stream-Id"), ids, func() { cancel(); resp.Body.Close() }
	}
	for round := range rounds {
		p := startBridge(t, cfg)
		sid, ids, stop := read(p, round, func(ids []string) bool { return len(ids) == perRound })
		js, _ := json.Marshal(ids)
		st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", sid, "application/json", js)
		if st != http.StatusOK || m["acked"] != float64(len(ids)) {
			t.Fatalf("round %d: /ack %d %v", round, st, m)
		}
		_ = p.cmd.Process.Kill() // the moment the 200 is in
		stop()
		<-p.exited
		for _, id := range ids {
			ackedAt[id] = round
		}
	}
	// The last replica reads the rest and acknowledges it.
	p := startBridge(t, cfg)
	sid, rest, stop := read(p, rounds, func([]string) bool { return len(seen) == n })
	defer stop()
	if len(again) > 0 {
		sort.Strings(again)
		t.Fatalf("%d messages acknowledged with a 200 were delivered again:\n%v", len(again), again)
	}
	js, _ := json.Marshal(rest)
	if st, m := postAck(t, p.DataURL+"/v1/streams/out/ack", sid, "application/json", js); st != http.StatusOK {
		t.Fatalf("the last /ack: %d %v", st, m)
	}
	left := len(rest)
	deadline := time.Now().Add(30 * time.Second)
	for subscriptionBacklog(t, b, topic, "receipts") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d", subscriptionBacklog(t, b, topic, "receipts"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d rounds of %d records acknowledged then SIGKILL; %d acknowledged with a 200, none delivered again; %d more read after", rounds, perRound, rounds*perRound, left)
}
