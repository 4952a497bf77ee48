package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestEgressAcksAnswered200SurviveAKilledReplica: bridge replicas serve one shared
// subscription (ack=client) of single messages and batches of 10. A client reads a few
// records from one replica, acknowledges them, and that replica is killed (SIGKILL) the
// moment the 200 arrives; another replica takes its place, while a second replica keeps
// serving another client that acknowledges 10 records at a time. A 200 means the broker has the acknowledgement (ack receipts), so no
// message acknowledged with a 200 is ever delivered again, while every message is
// delivered and the subscription's backlog ends at 0. (With acknowledgements answered
// once queued, ackReceipt: false, the group still waiting in the killed process was lost
// and those messages came back. On a broker without batch-index acknowledgements, which
// ignores the acknowledgement of part of a batch, a message of a batch not acknowledged
// whole can come back after its 200: docs/http-api.md.)
func TestEgressAcksAnswered200SurviveAKilledReplica(t *testing.T) {
	b := broker.Get(t)
	topic := b.Topic(t, "ack-receipts")
	const n, rounds, perRound = 600, 8, 25
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
    maxUnacked: 30
`, b.URL, topic)
	var mu sync.Mutex           // the steady client's goroutine shares these
	ackedAt := map[string]int{} // id -> the round whose /ack answered 200 for it (-1: the steady replica's)
	markAcked := func(round int) func([]string) {
		return func(ids []string) {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				ackedAt[id] = round
			}
		}
	}
	seen := map[string]bool{}
	var again []string // ids delivered after a 200 acknowledged them
	// note records a delivery.
	note := func(id string, round int) {
		mu.Lock()
		defer mu.Unlock()
		if r, ok := ackedAt[id]; ok {
			again = append(again, fmt.Sprintf("%s (acknowledged with a 200 in round %d, delivered again in round %d)", id, r, round))
		}
		seen[id] = true
	}
	// read takes records from a new stream on p until enough says so (or 40 s pass).
	read := func(p *bridgeProc, round int, enough func(ids []string) bool) (sid string, ids []string, stop func()) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out", nil)
		if resp.StatusCode != http.StatusOK {
			cancel()
			t.Fatalf("round %d: GET %d", round, resp.StatusCode)
		}
		rd := recordio.NewReader(resp.Body)
		for !locked(&mu, func() bool { return enough(ids) }) {
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
			note(e.MessageID, round)
			ids = append(ids, e.MessageID)
		}
		return resp.Header.Get("Stream-Id"), ids, func() { cancel(); resp.Body.Close() }
	}
	// The steady replica's client: reads slowly, acknowledging every 10, until the
	// rounds are over.
	steady := startBridge(t, cfg)
	sctx, scancel := context.WithCancel(context.Background())
	steadyDone := make(chan string, 1)
	go func() {
		steadyDone <- steadyClient(sctx, steady.DataURL+"/v1/streams/out", 10*time.Millisecond, note, markAcked(-1), func() bool { return false })
	}()
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
		markAcked(round)(ids)
	}
	scancel()
	if problem := <-steadyDone; problem != "" {
		t.Fatalf("the steady replica's client: %s", problem)
	}
	steady.terminate(30 * time.Second)
	// The last replica reads the rest and acknowledges it.
	p := startBridge(t, cfg)
	before := len(ackedAt)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if problem := steadyClient(ctx, p.DataURL+"/v1/streams/out", 0, note, markAcked(rounds),
		func() bool { return locked(&mu, func() bool { return len(seen) == n }) }); problem != "" || len(seen) != n {
		t.Fatalf("the last replica's client: %q; %d of %d messages seen", problem, len(seen), n)
	}
	if len(again) > 0 {
		sort.Strings(again)
		t.Fatalf("%d messages acknowledged with a 200 were delivered again:\n%v", len(again), again)
	}
	left := len(ackedAt) - before
	deadline := time.Now().Add(30 * time.Second)
	for subscriptionBacklog(t, b, topic, "receipts") != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("backlog %d", subscriptionBacklog(t, b, topic, "receipts"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d rounds of %d records acknowledged then SIGKILL, beside a replica whose client acknowledged %d; %d acknowledged with a 200 before the last replica, none delivered again; %d more read after",
		rounds, perRound, before-rounds*perRound, before, left)
}

func locked(mu *sync.Mutex, f func() bool) bool {
	mu.Lock()
	defer mu.Unlock()
	return f()
}

// steadyClient reads records from url (ack=client, envelope json), one every every,
// posting their ids to /ack by 10 and calling acked with them on each 200, until ctx
// ends or done says so (what it holds then acknowledged first); it returns what went
// wrong, "" for nothing.
func steadyClient(ctx context.Context, url string, every time.Duration, note func(id string, round int), acked func([]string), done func() bool) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "application/recordio")
	resp, err := h1Client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "GET " + resp.Status
	}
	sid := resp.Header.Get("Stream-Id")
	rd := recordio.NewReader(resp.Body)
	var ids []string
	for !done() {
		rec, err := rd.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ""
			}
			return err.Error()
		}
		var e struct {
			MessageID string `json:"messageId"`
		}
		if err := json.Unmarshal(rec, &e); err != nil {
			return err.Error()
		}
		note(e.MessageID, -1)
		ids = append(ids, e.MessageID)
		if len(ids) == 10 || done() {
			js, _ := json.Marshal(ids)
			areq, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/ack", bytes.NewReader(js))
			areq.Header.Set("Content-Type", "application/json")
			areq.Header.Set("Stream-Id", sid)
			aresp, err := h1Client.Do(areq)
			if err != nil {
				if ctx.Err() != nil {
					return ""
				}
				return err.Error()
			}
			aresp.Body.Close()
			if aresp.StatusCode != http.StatusOK {
				return "/ack " + aresp.Status
			}
			acked(ids)
			ids = nil
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(every):
		}
	}
	return ""
}
