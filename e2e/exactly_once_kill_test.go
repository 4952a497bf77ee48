package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/recordio"
)

// The exactly-once proof's size. make test runs the short form (the defaults); the full
// form is make e2e-exactly-once: 100 000 events, the bridge killed 10 times
// and the broker 5 times.
func exactlyOnceSize() (events, bridgeKills, brokerKills int) {
	events, bridgeKills, brokerKills = 8000, 3, 1
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

// TestExactlyOnceAcrossKills streams Mesos events into three topics (two partitioned:
// tasks, keyed and keyless, and heartbeats, keyless, every other event; one templated)
// with a client that resumes from its first unreceipted record whenever its request
// fails, while the test kill -9s the bridge and the broker. With a stream name every
// event is stored once, in input order per topic and key (the keyless ones on one
// partition), and each receipt says duplicate exactly when the copy in Pulsar came from
// an earlier request; without one, the resent records that had been persisted are
// stored twice, and counted. Each bridge kill is made to land while records it
// persisted still have their receipts on the way (the client holds them back until the
// bridge's metrics count more than it has), and those records must come back as
// duplicates, or be stored twice without a name. At the middle bridge kill both
// partitioned topics grow from 3 to 5 partitions and one partition of tasks is unloaded
// just before, so records resent under the new count include some the killed bridge had
// not persisted while it had persisted later ones. Events lost, stored twice and
// receipted wrongly are counted per topic and judged before anything else.
func TestExactlyOnceAcrossKills(t *testing.T) {
	b := broker.Get(t)
	events, bridgeKills, brokerKills := exactlyOnceSize()
	if !b.Controllable() && brokerKills > 0 {
		t.Logf("broker not started by pulsar.sh (shared): the %d broker kills are left out, the bridge kills run", brokerKills)
		brokerKills = 0
	}
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
	b.CreatePartitionedTopic(t, beats, 3) // keyless only
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
      - match: {json: {type: OFFERS}}
        topic: %s
      - match: {json: {type: HEARTBEAT}}
        topic: %s
    default:
      topic: "%s/events-{json:test.stream}"
`, b.URL, ns, tasks, tasks, tasks, beats, ns)
	evs := make([]eoEvent, n)
	for i := range evs {
		// Every other event is a heartbeat: a bridge process sends more keyless records to
		// one topic than a producer's batch holds (1 000), and a kill catches several
		// partitions' records in flight, keyed and keyless.
		typ := mesosTypes[(i/2)%len(mesosTypes)]
		if i%2 == 0 {
			typ = "HEARTBEAT"
		}
		task := fmt.Sprintf("task-%d", i%37)
		e := eoEvent{body: mesosEvent(typ, 0, i, task), topic: events}
		switch typ {
		case "UPDATE", "FAILURE":
			e.topic, e.key = tasks, task
		case "OFFERS":
			e.topic = tasks // keyless, on the partitioned topic
		case "HEARTBEAT":
			e.topic = beats
		}
		evs[i] = e
	}

	// Kill k happens once event at(k) is receipted: the client's writer waits at the gate
	// there, so everything before it is settled, and the killer lets the next events go
	// only once it is ready to catch them in flight.
	kills := bridgeKills + brokerKills
	at := func(k int) int { return k * n / (kills + 1) }
	gate := newEOGate(at(1))
	if kills == 0 {
		gate.open(n)
	}

	// The client's connections hold back the receipts while the killer asks them to, so
	// that a bridge kill -9 lands when records are persisted but their receipts are still
	// on their way: the receipts the kill cuts are what a network loses with the process.
	hold := newReceiptHold()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, DisableCompression: true, DialContext: hold.dial}}

	var url atomic.Value
	p := startBridge(t, cfg)
	url.Store(p.DataURL + "/v1/publish/mesos")

	// The client: keeps every event until it is receipted and, after any failure, sends
	// again from the first unreceipted one.
	var progress atomic.Int64  // the first unreceipted event
	var sent atomic.Int64      // one past the last event written
	var persisted atomic.Int64 // receipts with status 200 received, over the run
	receipts := make([][]eoReceipt, n)
	sentCount := make([]int, n)
	var requests int
	var requesting atomic.Int64 // the request the client is in, for the killer
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
			requesting.Store(int64(requests))
			advanced := false
			err := eoRequest(client, url.Load().(string), named, requests, next, evs, sentCount, &sent, gate, func(r eoResult) {
				if r.status == 200 {
					receipts[r.index] = append(receipts[r.index], eoReceipt{req: requests, dup: r.dup})
					persisted.Add(1)
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
	caught := 0              // records persisted by a killed bridge whose receipts the kill cut
	base := persisted.Load() // 200 receipts before this bridge process answered any
	done := false
	var clientResult error
	// waitEvery polls cond every so often until it holds, the client ends (false) or the deadline passes.
	waitEvery := func(what string, every time.Duration, cond func() bool) bool {
		for !cond() {
			select {
			case clientResult = <-clientErr:
				done = true
				return false
			case <-time.After(every): // polling the client and the bridge
			}
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("%s: only %d of %d events receipted after %s", what, progress.Load(), n, time.Since(start))
			}
		}
		return true
	}
	waitFor := func(what string, cond func() bool) bool { return waitEvery(what, 20*time.Millisecond, cond) }
	// The stream's producer name, as ingress.ProducerName makes it: a named stream's
	// keyless records go by it, to one partition per partition count (3, then 5 once the
	// topics grew), whatever producer sent them, so a resend meets its first copy's
	// deduplication there. (Round-robin sticks to one partition for a batching delay, so
	// the count alone cannot tell; the partition can.)
	name := "recordio-bridge/mesos/scheduler-1"
	keylessPart3, keylessPart5 := pulsar.JavaStringHash.Partition(name, 3), pulsar.JavaStringHash.Partition(name, 5)
	// Partitions are added to both partitioned topics (3 to 5) while a bridge kill catches
	// records in flight: the middle bridge kill's.
	growAt, grownCaught := 0, 0
	growFrom, growTo, growReq := 0, 0, 0 // the window: events written and unreceipted, and the last request under 3 partitions
	for k, bk := 1, 0; k <= kills; k++ {
		if k*brokerKills/kills == (k-1)*brokerKills/kills {
			if bk++; bk == (bridgeKills+1)/2 {
				growAt = k
			}
		}
	}
	for k := 1; k <= kills && !done; k++ {
		if !waitFor("before kill "+strconv.Itoa(k), func() bool { return progress.Load() >= int64(at(k)) }) {
			break
		}
		if k*brokerKills/kills != (k-1)*brokerKills/kills { // brokerKills slots, evenly spread, the last one included
			// The next events go; the broker dies once the client has written some. The
			// receipts are held meanwhile, so the client cannot have them all (and be done)
			// before the kill.
			hold.start()
			gate.open(at(k + 1))
			if !waitFor("broker kill", func() bool { return sent.Load() > int64(at(k)) }) {
				break
			}
			brokerDone++
			t.Logf("kill -9 of the broker at %d receipted, %d written", progress.Load(), sent.Load())
			b.Restart(t)
			hold.release()
			continue
		}
		// The receipts stop reaching the client, then the next events go; once the
		// client's reader waits on the hold, the receipts it has are final, and the bridge
		// dies as soon as its metrics count more records persisted than that.
		hold.start()
		if k == growAt {
			// The bridge's producers go on routing by 3 partitions until it dies. The
			// partition of the stream's keyless records on tasks is unloaded as well: its
			// producer reconnects while the other partitions persist the next records, so
			// the kill lands with later records persisted on some partitions and earlier
			// ones not on another, as a slow partition or a load balancer's unload leaves
			// them; resent by 5 partitions, some of those earlier records go where the
			// stream's later ones already are.
			for _, topic := range []string{tasks, beats} {
				b.MustAdmin(t, http.MethodPost, adminTopicPath(topic)+"/partitions", []byte("5"))
			}
			b.MustAdmin(t, http.MethodPut, adminTopicPath(fmt.Sprintf("%s-partition-%d", tasks, keylessPart3))+"/unload", nil)
			growReq = int(requesting.Load()) // served by this bridge: its producers route by 3 partitions
		}
		gate.open(at(k + 1))
		// Polled closely, so that the kill lands while the next records are still on their
		// way to the partitions, some persisted and some not.
		if !waitEvery("holding the receipts", time.Millisecond, hold.reading) {
			break
		}
		got := persisted.Load() - base
		var settled int64
		if !waitEvery("a record persisted under the hold", time.Millisecond, func() bool {
			settled = int64(metricValue(t, scrape(t, p.OpsURL), `bridge_ingress_records_total{route="mesos",status="200"}`))
			return settled > got
		}) {
			break
		}
		bridgeDone++
		_ = p.cmd.Process.Kill()
		<-p.exited
		hold.cut() // the receipts still on their way are lost with the connection
		if k == growAt {
			// The window: what the client had written and not had receipted when the
			// bridge whose producers routed by 3 partitions died.
			growFrom, growTo = int(progress.Load()), int(sent.Load())
			grownCaught = growTo - growFrom
			t.Logf("%s and %s grown from 3 to 5 partitions; the bridge killed with %d records written and unreceipted", tasks, beats, grownCaught)
		}
		caught += int(settled - got)
		t.Logf("kill -9 of the bridge at %d receipted, %d written: %d records persisted, %d receipted", progress.Load(), sent.Load(), settled, got)
		base = persisted.Load()
		p = startBridge(t, cfg)
		url.Store(p.DataURL + "/v1/publish/mesos")
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
	if bridgeDone != bridgeKills || brokerDone != brokerKills {
		t.Fatalf("the client finished after %d bridge and %d broker kills of %d and %d", bridgeDone, brokerDone, bridgeKills, brokerKills)
	}
	elapsed := time.Since(start)

	// The oracle: the official client reads the three topics.
	c := newOfficialClient(t, b)
	stored := make([][]int, n)       // event -> the requests whose copies are stored
	storedPart := make([][]int32, n) // event -> the partitions of its copies
	keyless := map[int]int{}         // the partitioned topic's keyless events by partition
	beatParts := map[int]int{}       // the keyless-only topic's events by partition
	var disorder []string            // first copies out of input order in their key and partition
	for _, topic := range []string{tasks, beats, events} {
		last := map[string]int{} // by key and partition: a key's records move when partitions are added
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
			storedPart[i] = append(storedPart[i], m.ID().PartitionIdx())
			if topic == tasks && m.Key() == "" {
				keyless[int(m.ID().PartitionIdx())]++
			}
			if topic == beats {
				beatParts[int(m.ID().PartitionIdx())]++
			}
			if named && len(stored[i]) == 1 { // a second copy (see below) is out of order by nature
				lk := m.Key() + "\x00" + strconv.Itoa(int(m.ID().PartitionIdx()))
				if prev, ok := last[lk]; ok && i <= prev {
					disorder = append(disorder, fmt.Sprintf("%s key %q partition %d: event %d after %d", topic, m.Key(), m.ID().PartitionIdx(), i, prev))
				}
				last[lk] = i
			}
		}
	}

	// What the stream's user sees, counted per topic before anything else is judged: events
	// lost, events stored twice (with a stream name, besides the partition change's
	// window, below), and
	// receipts whose "duplicate" disagrees with where the stored copies came from (a
	// receipt is a duplicate exactly when no copy came from its own request, and then one
	// came from an earlier one).
	type eoTally struct{ lost, twice, crossed, wrongReceipts, dupReceipts int }
	tally := map[string]*eoTally{tasks: {}, beats: {}, events: {}}
	var examples []string
	example := func(format string, args ...any) {
		if len(examples) < 5 {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
	}
	resent, dupReceipts, copies, persistedResent := 0, 0, 0, 0
	for i := range n {
		tl := tally[evs[i].topic]
		resent += sentCount[i] - 1
		copies += len(stored[i])
		for _, r := range receipts[i] {
			if r.dup {
				dupReceipts++
			}
		}
		if len(stored[i]) == 0 {
			tl.lost++
			example("event %d (%s) is missing; its receipts %+v", i, evs[i].topic, receipts[i])
		}
		if !named {
			if len(stored[i]) > 1 {
				tl.twice++ // counted, and judged below: without a name a resend is stored again
			}
			continue
		}
		// Persisted before the partitions were added, its receipt cut by the kill, resent
		// by a producer of the new count (under that count's name): the documented
		// duplicate, one copy from a request the bridge routing by 3 partitions served,
		// one from a later request, on its new partition or its old one.
		isCrossed := growAt > 0 && evs[i].topic != events && i >= growFrom && i < growTo && len(stored[i]) == 2 &&
			min(stored[i][0], stored[i][1]) <= growReq && max(stored[i][0], stored[i][1]) > growReq
		if isCrossed {
			tl.crossed++
		} else if len(stored[i]) > 1 {
			tl.twice++
			example("event %d (%s) is stored %d times (requests %v, partitions %v; receipts %+v)", i, evs[i].topic, len(stored[i]), stored[i], storedPart[i], receipts[i])
		}
		for _, r := range receipts[i] {
			own, earlier := false, false
			for _, from := range stored[i] {
				own = own || from == r.req
				earlier = earlier || from < r.req
			}
			if r.dup == own || (r.dup && !earlier) {
				tl.wrongReceipts++
				example("event %d (%s): receipt of request %d says duplicate=%v, the stored copies came from requests %v", i, evs[i].topic, r.req, r.dup, stored[i])
			}
			if r.dup {
				tl.dupReceipts++
				if !isCrossed {
					persistedResent++
				}
			}
		}
	}
	lost, twice, crossed, wrong := 0, 0, 0, 0
	for _, topic := range []string{tasks, beats, events} {
		tl := tally[topic]
		t.Logf("%s: %d events lost, %d stored twice, %d stored twice across the partition change, %d duplicate receipts, %d receipts whose duplicate flag is wrong",
			topic, tl.lost, tl.twice, tl.crossed, tl.dupReceipts, tl.wrongReceipts)
		lost, twice, crossed, wrong = lost+tl.lost, twice+tl.twice, crossed+tl.crossed, wrong+tl.wrongReceipts
	}
	if lost > 0 || named && (twice > 0 || wrong > 0) {
		t.Fatalf("%d events lost, %d stored twice outside the partition change's window, %d receipts whose duplicate flag is wrong; for example:\n%s",
			lost, twice, wrong, strings.Join(examples, "\n"))
	}
	if len(disorder) > 0 {
		t.Fatalf("%d events out of input order in their topic, key and partition; the first: %s", len(disorder), disorder[0])
	}
	if len(keyless) == 0 {
		t.Fatal("no keyless event reached the partitioned topic")
	}
	for _, parts := range []map[int]int{keyless, beatParts} {
		for part := range parts {
			if named && part != keylessPart3 && (growAt == 0 || part != keylessPart5) {
				t.Fatalf("the named stream's keyless events are on partitions %v, want them on %d (3 partitions) or %d (5)", parts, keylessPart3, keylessPart5)
			}
		}
	}
	if named {
		t.Logf("named stream: %d events, %d requests, %d bridge and %d broker kills in %s: every event stored, in order per topic, key and partition; %d records resent, %d of them already persisted = %d duplicate receipts (the bridge kills cut %d receipts)",
			n, requests, bridgeDone, brokerDone, elapsed.Round(time.Second), resent, persistedResent, dupReceipts, caught)
		if growAt > 0 {
			t.Logf("partitions added (3 to 5) with %d records written and unreceipted (events %d to %d): %d events stored twice (their first copy under 3 partitions, the resent one under 5); every other event once", grownCaught, growFrom, growTo-1, crossed)
			if crossed > grownCaught {
				t.Fatalf("%d events stored twice across the partition change, more than the %d written and unreceipted when it happened", crossed, grownCaught)
			}
		}
		// Each record a killed bridge persisted without its receipt reaching the client is
		// resent and must come back as a duplicate: the proof has caught records in flight.
		if bridgeKills > 0 && (resent == 0 || persistedResent == 0 || caught == 0 || persistedResent+crossed < caught) {
			t.Fatalf("the kills caught nothing in flight or lost track of it: %d records resent, %d receipted as duplicates; the bridge kills cut %d receipts of persisted records", resent, persistedResent, caught)
		}
	} else {
		if dupReceipts != 0 {
			t.Fatalf("%d duplicate receipts without a stream name", dupReceipts)
		}
		t.Logf("unnamed stream: %d events, %d requests, %d bridge and %d broker kills in %s: %d records resent, %d stored twice or more (%d copies in all), no duplicate receipts (the bridge kills cut %d receipts)",
			n, requests, bridgeDone, brokerDone, elapsed.Round(time.Second), resent, copies-n, copies, caught)
		// Without a stream name each record persisted without its receipt is stored again.
		if bridgeKills > 0 && (resent == 0 || copies == n || caught == 0 || copies-n < caught) {
			t.Fatalf("the kills caught nothing in flight or lost track of it: %d records resent, %d extra copies stored; the bridge kills cut %d receipts of persisted records", resent, copies-n, caught)
		}
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
func eoRequest(client *http.Client, url string, named bool, attempt, first int, evs []eoEvent, sentCount []int, sent *atomic.Int64, gate *eoGate, onReceipt func(eoResult)) error {
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
					sent.Store(int64(i))
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
				sent.Store(int64(i + 1))
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
	resp, err := client.Do(req.WithContext(ctx))
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

// receiptHold wraps the client's connections so that the test can stop the receipts on
// their way: while held, reads wait (the bytes stay in the kernel's socket buffer), and
// cut closes every connection, so what was held is lost as with a dead peer.
type receiptHold struct {
	mu      sync.Mutex
	held    chan struct{} // non-nil while held; closed when the hold ends
	waiting bool          // a read has waited on this hold
	conns   map[*heldConn]struct{}
}

type heldConn struct {
	net.Conn
	h    *receiptHold
	dead chan struct{}
	once sync.Once
}

func newReceiptHold() *receiptHold { return &receiptHold{conns: map[*heldConn]struct{}{}} }

func (h *receiptHold) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hc := &heldConn{Conn: c, h: h, dead: make(chan struct{})}
	h.mu.Lock()
	h.conns[hc] = struct{}{}
	h.mu.Unlock()
	return hc, nil
}

// start holds every read from now on.
func (h *receiptHold) start() {
	h.mu.Lock()
	h.held, h.waiting = make(chan struct{}), false
	h.mu.Unlock()
}

// reading says whether a read waits on the hold: the client has taken every receipt it
// was given before the hold (the response's reader reads the connection only once its
// buffers are empty).
func (h *receiptHold) reading() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.waiting
}

// release ends the hold: the receipts held flow on.
func (h *receiptHold) release() {
	h.mu.Lock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
	h.mu.Unlock()
}

// cut closes every connection and ends the hold.
func (h *receiptHold) cut() {
	h.mu.Lock()
	for c := range h.conns {
		c.close()
		delete(h.conns, c)
	}
	h.mu.Unlock()
	h.release()
}

func (c *heldConn) Read(p []byte) (int, error) {
	c.h.mu.Lock()
	held := c.h.held
	if held != nil {
		c.h.waiting = true
	}
	c.h.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-c.dead:
		}
	}
	select {
	case <-c.dead:
		return 0, net.ErrClosed
	default:
	}
	return c.Conn.Read(p)
}

func (c *heldConn) close() { c.once.Do(func() { close(c.dead); _ = c.Conn.Close() }) }

func (c *heldConn) Close() error {
	c.close()
	c.h.mu.Lock()
	delete(c.h.conns, c)
	c.h.mu.Unlock()
	return nil
}
