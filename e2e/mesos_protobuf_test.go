package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/javapeer"
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

// TestMesosOffersReadBackAsJSONLoseNoField: OFFERS (with resources, reservations,
// attributes, executor ids), INVERSE_OFFERS (an agent, an unavailability) and
// UPDATE_OPERATION_STATUS (a UUID) events encoded by mesos-go, published through the
// bridge under the built-in mesos.v1.scheduler.Event schema and read back from the real
// broker as JSON, carry every field sent: each JSON record, parsed back into protobuf by
// the Mesos 1.11 types the bridge embeds, is bytes mesos-go decodes equal to the event it
// sent; the inverse offer's agent is routed by its path; and an event carrying a field
// Mesos 1.11 does not define is not served without it: the stream ends naming it.
func TestMesosOffersReadBackAsJSONLoseNoField(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "mesosjson")
	topic := "persistent://" + ns + "/" + broker.Name("events")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: mesos
    contentTypes: [application/x-protobuf]
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event, validate: true}
    rules:
      - match: {proto: {type: [INVERSE_OFFERS]}}
        topic: %s
        key: "{proto:inverse_offers.inverse_offers.agent_id.value}"
    default: {topic: %s}
streams:
  - name: events
    topics: [%s]
    contentType: application/x-protobuf
    position: earliest
`, b.URL, topic, topic, topic))

	str := func(s string) *string { return &s }
	scalar, ranges := mesos.SCALAR, mesos.RANGES
	static := mesos.Resource_ReservationInfo_STATIC
	offer := func(i int) mesos.Offer {
		return mesos.Offer{
			ID: mesos.OfferID{Value: fmt.Sprintf("offer-%d", i)}, FrameworkID: mesos.FrameworkID{Value: "fw-1"},
			AgentID: mesos.AgentID{Value: fmt.Sprintf("agent-%d", i)}, Hostname: fmt.Sprintf("agent-%d.example", i),
			Resources: []mesos.Resource{
				{Name: "cpus", Type: &scalar, Scalar: &mesos.Value_Scalar{Value: 3.5},
					Reservations: []mesos.Resource_ReservationInfo{{Type: &static, Role: str("web")}}},
				{Name: "mem", Type: &scalar, Scalar: &mesos.Value_Scalar{Value: 2048}},
				{Name: "ports", Type: &ranges, Ranges: &mesos.Value_Ranges{Range: []mesos.Value_Range{{Begin: 31000, End: 32000}}}},
			},
			Attributes:  []mesos.Attribute{{Name: "rack", Type: mesos.TEXT, Text: &mesos.Value_Text{Value: fmt.Sprintf("r%d", i)}}},
			ExecutorIDs: []mesos.ExecutorID{{Value: "exec-1"}},
		}
	}
	events := []*scheduler.Event{
		{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: []mesos.Offer{offer(1), offer(2)}}},
		{Type: scheduler.Event_INVERSE_OFFERS, InverseOffers: &scheduler.Event_InverseOffers{InverseOffers: []mesos.InverseOffer{{
			OfferID: mesos.OfferID{Value: "inverse-1"}, FrameworkID: mesos.FrameworkID{Value: "fw-1"}, AgentID: &mesos.AgentID{Value: "agent-9"},
			Unavailability: mesos.Unavailability{Start: mesos.TimeInfo{Nanoseconds: 1700000000000000000}, Duration: &mesos.DurationInfo{Nanoseconds: 3600e9}},
		}}}},
		{Type: scheduler.Event_UPDATE_OPERATION_STATUS, UpdateOperationStatus: &scheduler.Event_UpdateOperationStatus{Status: mesos.OperationStatus{
			OperationID: &mesos.OperationID{Value: "op-1"}, State: mesos.OPERATION_FINISHED,
			UUID: &mesos.UUID{Value: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}, AgentID: &mesos.AgentID{Value: "agent-1"},
		}}},
	}
	var recs [][]byte
	for _, ev := range events {
		raw, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, raw)
	}
	// Last, an event of a newer API: a field 99 Mesos 1.11 does not define (tag 99<<3|varint, 1).
	recs = append(recs, append(append([]byte(nil), recs[0]...), 0x98, 0x06, 0x01))
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

	// The inverse offer is keyed by its agent (agent_id = 4), not its framework.
	c := newOfficialClient(t, b)
	cons := officialSubscribe(t, c, topic)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range len(recs) {
		msg, err := cons.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(msg.Payload(), recs[1]) && msg.Key() != "agent-9" {
			t.Errorf("the inverse offer's key %q, want its agent agent-9", msg.Key())
		}
		_ = cons.Ack(msg)
	}
	cons.Close()

	// The schema the broker registered is the API's: the Java client's AUTO_CONSUME
	// reads the inverse offer's agent and framework where they are, and the offers'
	// resources.
	seen := map[any]bool{}
	for _, m := range javapeer.AutoConsume(t, b.URL, topic, len(recs), 30*time.Second) {
		var v map[string]any
		if m.Error != "" || json.Unmarshal(m.Value, &v) != nil {
			t.Fatalf("AUTO_CONSUME: %+v", m)
		}
		seen[v["type"]] = true
		switch v["type"] {
		case "INVERSE_OFFERS":
			io, _ := v["inverse_offers"].(map[string]any)["inverse_offers"].([]any)[0].(map[string]any)
			if io["agent_id"].(map[string]any)["value"] != "agent-9" || io["framework_id"].(map[string]any)["value"] != "fw-1" {
				t.Errorf("AUTO_CONSUME reads the inverse offer as %s", m.Value)
			}
		case "OFFERS":
			o, _ := v["offers"].(map[string]any)["offers"].([]any)[0].(map[string]any)
			if res, _ := o["resources"].([]any); len(res) != 3 {
				t.Errorf("AUTO_CONSUME reads the offer as %s", m.Value)
			}
		}
	}
	if !seen["OFFERS"] || !seen["INVERSE_OFFERS"] || !seen["UPDATE_OPERATION_STATUS"] {
		t.Errorf("AUTO_CONSUME read the events %v", seen)
	}

	// Read back as JSON through egress.
	set, err := os.ReadFile("../internal/schema/mesos.pb")
	if err != nil {
		t.Fatal(err)
	}
	var fds descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(set, &fds); err != nil {
		t.Fatal(err)
	}
	files, err := protodesc.NewFiles(&fds)
	if err != nil {
		t.Fatal(err)
	}
	d, err := files.FindDescriptorByName("mesos.v1.scheduler.Event")
	if err != nil {
		t.Fatal(err)
	}
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/events", map[string]string{"Message-Accept": "application/json"})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Message-Content-Type") != "application/json" {
		t.Fatalf("%d, Message-Content-Type %q", resp.StatusCode, resp.Header.Get("Message-Content-Type"))
	}
	r := recordio.NewReader(resp.Body)
	for i, sent := range events {
		rec, err := r.Next()
		if err != nil {
			t.Fatalf("after %d records: %v", i, err)
		}
		var v map[string]any
		if err := json.Unmarshal(rec, &v); err != nil {
			t.Fatalf("record %d: %s: %v", i, rec, err)
		}
		if i == 0 {
			res, _ := v["offers"].(map[string]any)["offers"].([]any)[0].(map[string]any)["resources"].([]any)
			if len(res) != 3 {
				t.Errorf("the first offer's resources in JSON: %v", res)
			}
		}
		m := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
		if err := protojson.Unmarshal(rec, m); err != nil {
			t.Fatalf("record %d: %s: %v", i, rec, err)
		}
		back, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var got scheduler.Event
		if err := got.Unmarshal(back); err != nil {
			t.Fatalf("record %d: mesos-go cannot decode what the JSON holds: %v", i, err)
		}
		if !got.Equal(sent) {
			t.Errorf("record %d: the JSON %s holds %v, want %v", i, rec, &got, sent)
		}
	}
	// The newer event is not served without its field 99: the stream ends naming it.
	if rec, err := r.Next(); err != io.EOF {
		t.Fatalf("the event with a field Mesos 1.11 does not define: %s, %v; want the stream's end", rec, err)
	}
	if got := resp.Trailer.Get("Stream-Error"); !strings.Contains(got, "field 99 (varint)") || !strings.Contains(got, "does not define") {
		t.Errorf("Stream-Error %q, want it to name field 99", got)
	}
}
