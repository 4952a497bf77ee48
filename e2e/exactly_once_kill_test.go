package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// The exactly-once proof's size. make test runs the short form (the defaults); the full
// form of issue 19 is make e2e-exactly-once: 100 000 events, the bridge killed 10 times
// and the broker 5 times.
func exactlyOnceSize() (events, bridgeKills, brokerKills int) {
	events, bridgeKills, brokerKills = 4000, 3, 1
	get := func(name string, v *int) {
		if s := os.Getenv(name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				panic(name + " must be a count")
			}
			*v = n
		}
	}
	get("EXACTLY_ONCE_EVENTS", &events)
	get("EXACTLY_ONCE_BRIDGE_KILLS", &bridgeKills)
	get("EXACTLY_ONCE_BROKER_KILLS", &brokerKills)
	return
}

// TestExactlyOnceAcrossKills streams Mesos events into three topics (one partitioned, one
// templated) with a client that resumes from its first unreceipted record whenever its
// request fails, while the test kill -9s the bridge and the broker. With a stream name
// every event is stored once, in input order per topic and key, and each receipt says
// duplicate exactly when the copy in Pulsar came from an earlier request; without one,
// the resent records that had been persisted are stored twice, and counted.
func TestExactlyOnceAcrossKills(t *testing.T) {
	b := broker.Get(t)
	if !b.Controllable() {
		t.Skip("broker not started by pulsar.sh; cannot kill it")
	}
	events, bridgeKills, brokerKills := exactlyOnceSize()
	for _, named := range []bool{true, false} {
		t.Run(map[bool]string{true: "named", false: "unnamed"}[named], func(t *testing.T) {
			exactlyOnceRun(t, b, named, events, bridgeKills, brokerKills)
		})
	}
}

type eoReceipt struct {
	req int // the request that answered
	dup bool
}

func exactlyOnceRun(t *testing.T, b *broker.Broker, named bool, n, bridgeKills, brokerKills int) {
	ns := dedupNamespace(t, b, "eo", true)
	tasks, beats := "persistent://"+ns+"/tasks", "persistent://"+ns+"/heartbeats"
	events := "persistent://" + ns + "/events-0" // the template's only value here
	b.CreatePartitionedTopic(t, tasks, 3)
	cfg := fmt.Sprintf(`
pulsar:
  url: %s
  operationTimeout: 10s
ingress:
  publishTimeout: 10s
routes:
  - name: mesos
    namespaces: [%s]
    headers: [X-Attempt]
    rules:
      - match: {json: {type: UPDATE}}
        topic: %s
        key: "{json:update.status.task_id.value}"
      - match: {json: {type: FAILURE}}
        topic: %s
        key: "{json:failure.executor_id.value}"
      - match: {json: {type: HEARTBEAT}}
        topic: %s
    default:
      topic: "%s/events-{json:test.stream}"
`, b.URL, ns, tasks, tasks, beats, ns)
	evs := make([]eoEvent, n)
	for i := range evs {
		typ := mesosTypes[i%len(mesosTypes)]
		task := fmt.Sprintf("task-%d", i%37)
		e := eoEvent{body: mesosEvent(typ, 0, i, task), topic: events}
		switch typ {
		case "UPDATE", "FAILURE":
			e.topic, e.key = tasks, task
		case "HEARTBEAT":
			e.topic = beats
		}
		evs[i] = e
	}

	// Kill k happens once event at(k) is receipted; meanwhile the client may send up to
	// ahead events past it, so records are in flight when the kill comes.
	kills := bridgeKills + brokerKills
	at := func(k int) int { return k * n / (kills + 1) }
	ahead := max(min(2000, n/(kills+1)/2), 1)
	gate := newEOGate(at(1) + ahead)
	if kills == 0 {
		gate.open(n)
	}

	var url atomic.Value
	p := startBridge(t, cfg)
	url.Store(p.DataURL + "/v1/publish/mesos")

	// The client: keeps every event until it is receipted and, after any failure, sends
	// again from the first unreceipted one.
	var progress atomic.Int64 // the first unreceipted event
	receipts := make([][]eoReceipt, n)
	sentCount := make([]int, n)
	var requests int
	clientErr := make(chan error, 1)
	stop := make(chan struct{})
	go func() {
		next, backoff := 0, 50*time.Millisecond
		for next < n {
			select {
			case <-stop:
				clientErr <- errors.New("stopped")
				return
			default:
			}
			requests++
			advanced := false
			err := eoRequest(url.Load().(string), named, requests, next, evs, sentCount, gate, func(r eoResult) {
				if r.status == 200 {
					receipts[r.index] = append(receipts[r.index], eoReceipt{req: requests, dup: r.dup})
				}
				for next < n && len(receipts[next]) > 0 {
					next++
					advanced = true
				}
				progress.Store(int64(next))
			})
			if err != nil && !advanced {
				time.Sleep(backoff) // the client's retry backoff (the bridge or broker is down)
				backoff = min(backoff*2, time.Second)
			} else {
				backoff = 50 * time.Millisecond
			}
		}
		clientErr <- nil
	}()

	// The killer, on this goroutine: kills spread evenly over the run.
	start := time.Now()
	deadline := time.Now().Add(time.Duration(n/50+600) * time.Second)
	bridgeDone, brokerDone := 0, 0
	done := false
	var clientResult error
	for k := 1; k <= kills && !done; k++ {
		for progress.Load() < int64(at(k)) && !done {
			select {
			case clientResult = <-clientErr:
				done = true
			case <-time.After(20 * time.Millisecond): // polling the client's progress
			}
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("only %d of %d events receipted after %s", progress.Load(), n, time.Since(start))
			}
		}
		if done {
			break
		}
		if k*brokerKills/kills != (k-1)*brokerKills/kills { // brokerKills slots, evenly spread, the last one included
			brokerDone++
			t.Logf("kill -9 of the broker at %d receipted", progress.Load())
			b.Restart(t)
			gate.open(min(at(k+1)+ahead, n))
			continue
		}
		bridgeDone++
		t.Logf("kill -9 of the bridge at %d receipted", progress.Load())
		_ = p.cmd.Process.Kill()
		<-p.exited
		p = startBridge(t, cfg)
		url.Store(p.DataURL + "/v1/publish/mesos")
		gate.open(min(at(k+1)+ahead, n))
	}
	if !done {
		select {
		case clientResult = <-clientErr:
		case <-time.After(time.Until(deadline)):
			close(stop)
			t.Fatalf("only %d of %d events receipted after %s", progress.Load(), n, time.Since(start))
		}
	}
	if clientResult != nil {
		t.Fatal(clientResult)
	}
	elapsed := time.Since(start)

	// The oracle: the official client reads the three topics.
	c := newOfficialClient(t, b)
	stored := make([][]int, n) // event -> the requests whose copies are stored
	for _, topic := range []string{tasks, beats, events} {
		last := map[string]int{}
		for _, m := range readAll(t, c, topic, 5*time.Second) {
			var e struct{ Test struct{ Seq int } }
			if err := json.Unmarshal(m.Payload(), &e); err != nil || e.Test.Seq < 0 || e.Test.Seq >= n {
				t.Fatalf("%s: payload %q", topic, m.Payload())
			}
			i := e.Test.Seq
			if evs[i].topic != topic || m.Key() != evs[i].key {
				t.Fatalf("event %d read from %s with key %q, sent to %s with key %q", i, topic, m.Key(), evs[i].topic, evs[i].key)
			}
			req, _ := strconv.Atoi(m.Properties()["x-attempt"])
			stored[i] = append(stored[i], req)
			if named {
				if prev, ok := last[m.Key()]; ok && i <= prev {
					t.Fatalf("%s key %q: event %d after %d", topic, m.Key(), i, prev)
				}
				last[m.Key()] = i
			}
		}
	}
	resent, dupReceipts, copies := 0, 0, 0
	for i := range n {
		resent += sentCount[i] - 1
		copies += len(stored[i])
		if len(stored[i]) == 0 {
			t.Fatalf("event %d is missing", i)
		}
		for _, r := range receipts[i] {
			if r.dup {
				dupReceipts++
			}
		}
	}
	if named {
		persistedResent := 0
		for i := range n {
			if len(stored[i]) != 1 {
				t.Fatalf("event %d is stored %d times (requests %v)", i, len(stored[i]), stored[i])
			}
			for _, r := range receipts[i] {
				// A receipt is a duplicate exactly when the stored copy came from an earlier request.
				if from := stored[i][0]; r.dup != (from != r.req) || from > r.req {
					t.Fatalf("event %d: receipt of request %d says duplicate=%v, the stored copy came from request %d", i, r.req, r.dup, from)
				}
				if r.dup {
					persistedResent++
				}
			}
		}
		t.Logf("named stream: %d events, %d requests, %d bridge and %d broker kills in %s: every event stored once, in order per topic and key; %d records resent, %d of them already persisted = %d duplicate receipts",
			n, requests, bridgeDone, brokerDone, elapsed.Round(time.Second), resent, persistedResent, dupReceipts)
	} else {
		if dupReceipts != 0 {
			t.Fatalf("%d duplicate receipts without a stream name", dupReceipts)
		}
		t.Logf("unnamed stream: %d events, %d requests, %d bridge and %d broker kills in %s: %d records resent, %d stored twice or more (%d copies in all), no duplicate receipts",
			n, requests, bridgeDone, brokerDone, elapsed.Round(time.Second), resent, copies-n, copies)
	}
}

// eoEvent is one event of the proof and where it must land.
type eoEvent struct {
	body       []byte
	topic, key string
}

type eoResult struct {
	index  int
	status int
	dup    bool
}

// eoRequest sends events from first on in one streaming request, hands each receipt
// to onReceipt as it arrives, and returns why the request ended early, if it did.
func eoRequest(url string, named bool, attempt, first int, evs []eoEvent, sentCount []int, gate *eoGate, onReceipt func(eoResult)) error {
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, url, pr)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("X-Attempt", strconv.Itoa(attempt))
	if named {
		req.Header.Set("Stream-Name", "scheduler-1")
		req.Header.Set("Stream-Sequence", strconv.Itoa(first))
	}
	var wg sync.WaitGroup
	wg.Add(1)
	over := make(chan struct{})
	go func() {
		defer wg.Done()
		var buf []byte
		for i := first; i < len(evs); i++ {
			if !gate.passes(i) {
				if len(buf) > 0 {
					if _, err := pw.Write(buf); err != nil {
						return
					}
					buf = buf[:0]
				}
				if !gate.wait(i, over) {
					return
				}
			}
			buf = recordio.AppendRecord(buf, evs[i].body)
			sentCount[i]++
			if len(buf) >= 32<<10 || i == len(evs)-1 {
				if _, err := pw.Write(buf); err != nil {
					return
				}
				buf = buf[:0]
			}
		}
		pw.Close()
	}()
	defer func() {
		close(over)
		pr.CloseWithError(errors.New("request over"))
		wg.Wait()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	resp, err := h1Client.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	rd := recordio.NewReader(resp.Body)
	for {
		rec, err := rd.Next()
		if err != nil {
			return fmt.Errorf("the response ended without a summary: %w", err)
		}
		var r receipt
		if err := json.Unmarshal(rec, &r); err != nil {
			return err
		}
		if r.Summary {
			pw.CloseWithError(errors.New("summary read")) // end the body, as a client should
			if r.Status != 200 {
				return fmt.Errorf("summary %+v", r)
			}
			return nil
		}
		idx := first + int(r.Seq)
		if named && (r.Sequence == nil || *r.Sequence != int64(idx)) {
			return fmt.Errorf("receipt %+v for event %d has the wrong sequence", r, idx)
		}
		onReceipt(eoResult{index: idx, status: r.Status, dup: r.Duplicate})
	}
}

// eoGate holds the client's writer before an event until the test lets it pass.
type eoGate struct {
	mu      sync.Mutex
	limit   int           // events below it may be sent
	changed chan struct{} // closed and replaced when limit grows
}

func newEOGate(limit int) *eoGate { return &eoGate{limit: limit, changed: make(chan struct{})} }

func (g *eoGate) passes(i int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return i < g.limit
}

// wait blocks until event i may be sent (true) or over is closed (false).
func (g *eoGate) wait(i int, over <-chan struct{}) bool {
	for {
		g.mu.Lock()
		ok, ch := i < g.limit, g.changed
		g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-over:
			return false
		}
	}
}

func (g *eoGate) open(limit int) {
	g.mu.Lock()
	if limit > g.limit {
		g.limit = limit
		close(g.changed)
		g.changed = make(chan struct{})
	}
	g.mu.Unlock()
}
