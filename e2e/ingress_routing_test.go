package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
)

// mesosEvent builds a Mesos-style scheduler event of the given type. Every event carries
// its stream and sequence number so the consumer side can check order and completeness.
func mesosEvent(typ string, stream, seq int, task string) []byte {
	var body string
	switch typ {
	case "SUBSCRIBED":
		body = `"subscribed":{"framework_id":{"value":"fw-1"},"heartbeat_interval_seconds":15}`
	case "HEARTBEAT":
		body = `"heartbeat":{}`
	case "OFFERS":
		body = `"offers":{"offers":[{"id":{"value":"o-` + strconv.Itoa(seq) + `"},"agent_id":{"value":"a-1"},"hostname":"node-1","resources":[{"name":"cpus","type":"SCALAR","scalar":{"value":4}}]}]}`
	case "UPDATE":
		body = `"update":{"status":{"task_id":{"value":"` + task + `"},"state":"TASK_RUNNING","agent_id":{"value":"a-1"},"uuid":"` + strconv.Itoa(seq) + `"}}`
	case "FAILURE":
		body = `"failure":{"agent_id":{"value":"a-1"},"executor_id":{"value":"` + task + `"},"status":1}`
	case "RESCIND":
		body = `"rescind":{"offer_id":{"value":"o-` + strconv.Itoa(seq) + `"}}`
	}
	return []byte(fmt.Sprintf(`{"type":%q,%s,"test":{"stream":%d,"seq":%d}}`, typ, body, stream, seq))
}

var mesosTypes = []string{"SUBSCRIBED", "HEARTBEAT", "OFFERS", "UPDATE", "FAILURE", "RESCIND", "UPDATE", "UPDATE", "HEARTBEAT", "OFFERS"}

// TestIngressRoutesMesosEventsByType streams 100 000 Mesos-style events through the
// bridge binary into three topics chosen by the event's type, with the task id as key,
// and checks every one with the official client: right topic, key and properties,
// per-key order, and the message id the receipt named.
func TestIngressRoutesMesosEventsByType(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "mesos")
	tasks, beats, events := ns+"/tasks", ns+"/heartbeats", ns+"/events"
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: mesos
    namespaces: [%s]
    headers: [X-Framework-Id]
    properties:
      source: scheduler
      eventType: "{json:type}"
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
      topic: %s
`, b.URL, ns, tasks, tasks, beats, events))

	const streams, perStream = 4, 25000
	type sent struct {
		topic, key, typ string
		id              string
	}
	want := make([][]sent, streams) // by stream, by seq
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	start := time.Now()
	for s := range streams {
		want[s] = make([]sent, perStream)
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := openStream(t, h1Client, p.DataURL+"/v1/publish/mesos", map[string]string{"X-Framework-Id": "fw-1"})
			batch := make([][]byte, 0, 100)
			for i := range perStream {
				typ := mesosTypes[i%len(mesosTypes)]
				task := fmt.Sprintf("task-%d-%d", s, i%37)
				topic, key := "persistent://"+events, ""
				switch typ {
				case "UPDATE", "FAILURE":
					topic, key = "persistent://"+tasks, task
				case "HEARTBEAT":
					topic = "persistent://" + beats
				}
				want[s][i] = sent{topic: topic, key: key, typ: typ}
				batch = append(batch, mesosEvent(typ, s, i, task))
				if len(batch) == cap(batch) {
					if err := st.send(batch...); err != nil {
						errs <- err
						return
					}
					batch = batch[:0]
				}
			}
			if err := st.send(batch...); err != nil {
				errs <- err
				return
			}
			rs, sum, err := st.finish(2 * time.Minute)
			if err != nil {
				errs <- fmt.Errorf("stream %d: %v", s, err)
				return
			}
			if sum.Status != 200 || sum.Records != perStream || sum.Published != perStream || len(rs) != perStream {
				errs <- fmt.Errorf("stream %d: summary %+v with %d receipts", s, sum, len(rs))
				return
			}
			for i, r := range rs {
				if r.Seq != int64(i) || r.Status != 200 || r.Topic != want[s][i].topic {
					errs <- fmt.Errorf("stream %d: receipt %d is %+v, want seq %d in %s", s, i, r, i, want[s][i].topic)
					return
				}
				want[s][i].id = r.MessageID
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	t.Logf("%d events in %d streams published and receipted in %s (%.0f records/s)", streams*perStream, streams, elapsed.Round(time.Millisecond),
		float64(streams*perStream)/elapsed.Seconds())

	// Read the three topics with the official client.
	c := newOfficialClient(t, b)
	counts := map[string]int{}
	lastSeq := map[string]int{} // stream/key -> last seq seen, for per-key order
	for _, topic := range []string{tasks, beats, events} {
		topic := "persistent://" + topic
		cons := officialSubscribe(t, c, topic)
		expected := 0
		for s := range streams {
			for i := range perStream {
				if want[s][i].topic == topic {
					expected++
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		for n := 0; n < expected; n++ {
			msg, err := cons.Receive(ctx)
			if err != nil {
				cancel()
				t.Fatalf("%s: after %d of %d messages: %v", topic, n, expected, err)
			}
			var ev struct {
				Type string `json:"type"`
				Test struct{ Stream, Seq int }
			}
			if err := json.Unmarshal(msg.Payload(), &ev); err != nil {
				t.Fatalf("payload %q: %v", msg.Payload(), err)
			}
			w := want[ev.Test.Stream][ev.Test.Seq]
			id := msg.ID()
			// The official client numbers the single partition of a non-partitioned topic 0;
			// the broker (and the receipt) say -1.
			gotID := fmt.Sprintf("%d:%d:-1:%d", id.LedgerID(), id.EntryID(), id.BatchIdx())
			props := msg.Properties()
			switch {
			case w.topic != topic:
				t.Fatalf("stream %d seq %d (%s) read from %s, routed to %s", ev.Test.Stream, ev.Test.Seq, ev.Type, topic, w.topic)
			case msg.Key() != w.key:
				t.Fatalf("stream %d seq %d: key %q, want %q", ev.Test.Stream, ev.Test.Seq, msg.Key(), w.key)
			case gotID != w.id:
				t.Fatalf("stream %d seq %d: official client reads message id %s, the receipt said %s", ev.Test.Stream, ev.Test.Seq, gotID, w.id)
			case props["source"] != "scheduler" || props["eventType"] != ev.Type || props["x-framework-id"] != "fw-1":
				t.Fatalf("stream %d seq %d: properties %v", ev.Test.Stream, ev.Test.Seq, props)
			}
			k := fmt.Sprintf("%d/%s", ev.Test.Stream, msg.Key())
			if last, ok := lastSeq[k]; ok && msg.Key() != "" && ev.Test.Seq <= last {
				t.Fatalf("key %s: seq %d after %d", k, ev.Test.Seq, last)
			}
			lastSeq[k] = ev.Test.Seq
			counts[topic]++
			_ = cons.Ack(msg)
		}
		cancel()
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		if msg, err := cons.Receive(ctx2); err == nil {
			t.Fatalf("%s: unexpected extra message %q", topic, msg.Payload())
		}
		cancel2()
	}
	t.Logf("checked with the official client: %v; keys and properties as configured, per-key order kept, message ids equal to the receipts'",
		shortCounts(counts))
}

func shortCounts(m map[string]int) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k[strings.LastIndex(k, "/")+1:], v))
	}
	return strings.Join(parts, " ")
}
