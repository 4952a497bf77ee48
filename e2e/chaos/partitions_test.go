package chaos

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestPartitionsAdded: a partitioned topic grows from 2 to 4 partitions while 16 keyed
// streams publish to it; the bridge must use the new partitions within a bounded time (the
// official clients look for new partitions every minute, and so does the bridge's client)
// and lose nothing. It runs in the short form too.
func TestPartitionsAdded(t *testing.T) {
	c := useCluster(t)
	run := randName("parts")
	topic := "persistent://chaos/allowed/" + run
	rest := c.Broker1Admin + "/admin/v2/persistent/chaos/allowed/" + run + "/partitions"
	c.mustAdmin(t, http.MethodPut, rest, "2")
	b := startBridge(t, bridgeConfig(c, viaProxy, c.ProxyURL, nil))

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ins []*ingressClient
	for i := range 16 {
		ic := newIngressClient(b.DataURL+"/v1/publish/load", run, fmt.Sprintf("%s-k%d", run, i), 50*time.Millisecond)
		ins = append(ins, ic)
		wg.Add(1)
		go func() { defer wg.Done(); ic.run(ctx, stop) }()
	}
	e := &env{c: c, ins: ins}
	stopped := false
	stopLoad := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer stopLoad()
	if !waitFor(ctx, 90*time.Second, func() bool { return e.allReceiptedSince(time.Time{}) }) {
		t.Fatalf("no receipts on every stream within 90s:\n%s", e.failures())
	}
	// The records in flight from the growth on bound the duplicates.
	for _, ic := range ins {
		ic.peakSince()
	}
	c.mustAdmin(t, http.MethodPost, rest, "4")
	grown := time.Now()
	parts := []string{topic + "-partition-0", topic + "-partition-1", topic + "-partition-2", topic + "-partition-3"}
	// The new partitions get messages: the oracle counts what is on partitions 2 and 3.
	var used time.Duration
	for used == 0 && time.Since(grown) < 3*time.Minute {
		counts, _ := readAll(t, c, parts[2:])
		if len(counts) > 0 {
			used = time.Since(grown)
			break
		}
		time.Sleep(5 * time.Second)
	}
	stopLoad()
	counts, order := readAll(t, c, parts)
	r := row{Fault: "partitions 2 → 4 while producing", Load: "16 keyed streams, 1 topic, Pulsar proxy"}
	for _, ic := range ins {
		r.InFlight += ic.peakSince()
	}
	for _, ic := range ins {
		ic.mu.Lock()
		for id := range ic.receipted { // id -> message id
			r.Receipted++
			if counts[id] == 0 {
				r.Lost++
			} else {
				r.Present++
			}
		}
		ic.mu.Unlock()
	}
	for _, n := range counts {
		r.Duplicated += max(n-1, 0)
	}
	if used == 0 {
		r.Recovered = "new partitions unused after 3m"
		t.Errorf("no message on the new partitions 3 minutes after the topic grew")
	} else {
		r.Recovered = "new partitions used after " + used.Round(time.Second).String()
	}
	if r.Lost > 0 {
		t.Errorf("%d receipted records missing", r.Lost)
	}
	if order > 0 {
		t.Errorf("%d records out of order in their key", order)
	}
	if r.Duplicated > r.InFlight {
		t.Errorf("%d duplicates, more than the %d records in flight from the growth on", r.Duplicated, r.InFlight)
	}
	r.Result = resultOf(t)
	addRow(r)
}
