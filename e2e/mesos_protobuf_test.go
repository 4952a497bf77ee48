package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/recordio"
)

// TestMesosGoEventsAreRoutedByFieldAndReadBackAsJSONAndAsMesosGoTypes: a scheduler event
// stream encoded by mesos-go's own generated types (an independent protobuf
// implementation of the Mesos v1 API, not the bridge's definitions), posted as
// application/x-protobuf RecordIO, is routed by event type and keyed by task id; egress
// gives a JSON client the events as protojson and a protobuf client bytes that mesos-go
// decodes back into events equal, field by field, to those sent.
func TestMesosGoEventsAreRoutedByFieldAndReadBackAsJSONAndAsMesosGoTypes(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "mesosgo")
	updates := "persistent://" + ns + "/" + broker.Name("updates")
	failures := "persistent://" + ns + "/" + broker.Name("failures")
	others := "persistent://" + ns + "/" + broker.Name("others")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: mesos
    contentTypes: [application/x-protobuf]
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
    rules:
      - match: {proto: {type: [UPDATE]}}
        topic: %s
        key: "{proto:update.status.task_id.value}"
      - match: {proto: {type: [FAILURE]}}
        topic: %s
        key: "{proto:failure.agent_id.value}"
    default: {topic: %s}
streams:
  - name: updates
    topics: [%s]
    contentType: application/x-protobuf
    position: earliest
    overrides: [subscription]
`, b.URL, updates, failures, others, updates))

	states := []mesos.TaskState{mesos.TASK_RUNNING, mesos.TASK_FINISHED, mesos.TASK_FAILED}
	var events []*scheduler.Event
	for i := range 6 {
		switch i % 3 {
		case 0, 1:
			events = append(events, &scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{
				Status: mesos.TaskStatus{
					TaskID:  mesos.TaskID{Value: fmt.Sprintf("task-%d", i)},
					State:   states[i%len(states)].Enum(),
					AgentID: &mesos.AgentID{Value: "agent-1"},
					Message: &[]string{fmt.Sprintf("status %d", i)}[0],
				}}})
		default:
			events = append(events, &scheduler.Event{Type: scheduler.Event_FAILURE, Failure: &scheduler.Event_Failure{
				AgentID: &mesos.AgentID{Value: fmt.Sprintf("agent-%d", i)}}})
		}
	}
	events = append(events, &scheduler.Event{Type: scheduler.Event_HEARTBEAT})
	var recs [][]byte
	for _, ev := range events {
		raw, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, raw)
	}
	st := openStream(t, h1Client, p.DataURL+"/v1/publish/mesos", map[string]string{"Message-Content-Type": "application/x-protobuf"})
	if err := st.send(recs...); err != nil {
		t.Fatal(err)
	}
	receipts, sum, err := st.finish(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Published != int64(len(recs)) {
		t.Fatalf("published %d of %d: %+v", sum.Published, len(recs), receipts)
	}
	wantTopic := func(ev *scheduler.Event) string {
		switch ev.Type {
		case scheduler.Event_UPDATE:
			return updates
		case scheduler.Event_FAILURE:
			return failures
		}
		return others
	}
	for _, r := range receipts {
		if want := wantTopic(events[r.Seq]); r.Status != 200 || r.Topic != want {
			t.Fatalf("record %d (%s): %+v, want 200 on %s", r.Seq, events[r.Seq].Type, r, want)
		}
	}

	// The official client sees the keys the rules made: the task id, the agent id.
	c := newOfficialClient(t, b)
	keyed := map[string]string{} // key -> topic
	for topic, n := range map[string]int{updates: 4, failures: 2} {
		cons := officialSubscribe(t, c, topic)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for range n {
			msg, err := cons.Receive(ctx)
			if err != nil {
				cancel()
				t.Fatalf("%s: %v", topic, err)
			}
			keyed[msg.Key()] = topic
			_ = cons.Ack(msg)
		}
		cancel()
		cons.Close()
	}
	for _, ev := range events {
		var key string
		switch ev.Type {
		case scheduler.Event_UPDATE:
			key = ev.Update.Status.TaskID.Value
		case scheduler.Event_FAILURE:
			key = ev.Failure.AgentID.Value
		default:
			continue
		}
		if keyed[key] != wantTopic(ev) {
			t.Errorf("key %q: on %q, want on %s (keys seen: %v)", key, keyed[key], wantTopic(ev), keyed)
		}
	}

	var sentUpdates []*scheduler.Event
	for _, ev := range events {
		if ev.Type == scheduler.Event_UPDATE {
			sentUpdates = append(sentUpdates, ev)
		}
	}
	read := func(sub, accept string) [][]byte {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/updates?subscription="+sub, map[string]string{"Message-Accept": accept})
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Message-Content-Type") != accept {
			t.Fatalf("Message-Accept %s: %d, Message-Content-Type %q", accept, resp.StatusCode, resp.Header.Get("Message-Content-Type"))
		}
		r := recordio.NewReader(resp.Body)
		var got [][]byte
		for len(got) < len(sentUpdates) {
			rec, err := r.Next()
			if err != nil {
				t.Fatalf("Message-Accept %s: after %d records: %v", accept, len(got), err)
			}
			got = append(got, append([]byte(nil), rec...))
		}
		return got
	}
	for i, rec := range read("json", "application/json") {
		var v struct {
			Type   string `json:"type"`
			Update struct {
				Status struct {
					TaskID  struct{ Value string } `json:"task_id"`
					State   string                 `json:"state"`
					AgentID struct{ Value string } `json:"agent_id"`
					Message string                 `json:"message"`
				} `json:"status"`
			} `json:"update"`
		}
		s := sentUpdates[i].Update.Status
		if err := json.Unmarshal(rec, &v); err != nil || v.Type != "UPDATE" || v.Update.Status.TaskID.Value != s.TaskID.Value ||
			v.Update.Status.State != s.State.String() || v.Update.Status.AgentID.Value != s.AgentID.Value || v.Update.Status.Message != *s.Message {
			t.Fatalf("JSON record %d: %s (%v), want the fields of %v", i, rec, err, sentUpdates[i])
		}
	}
	for i, rec := range read("bytes", "application/x-protobuf") {
		var got scheduler.Event
		if err := got.Unmarshal(rec); err != nil {
			t.Fatalf("protobuf record %d: mesos-go cannot decode it: %v", i, err)
		}
		if !got.Equal(sentUpdates[i]) {
			t.Fatalf("protobuf record %d: mesos-go decodes %v, want %v", i, &got, sentUpdates[i])
		}
	}
}
