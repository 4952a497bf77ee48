package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/javapeer"
	"github.com/recordio-bridge/bridge/recordio"
)

// avroRecord encodes {a: string, b: int} in Avro's binary encoding (zig-zag varints,
// length-prefixed strings), as a typed producer would.
func avroRecord(a string, b int32) []byte {
	out := protowire.AppendVarint(nil, protowire.EncodeZigZag(int64(len(a))))
	out = append(out, a...)
	return protowire.AppendVarint(out, protowire.EncodeZigZag(int64(b)))
}

// schedulerUpdate encodes a Mesos scheduler UPDATE event field by field on the wire
// (type 1, update 5 > status 1 > task_id 1 > value 1, state 2), independently of the
// bridge's descriptors.
func schedulerUpdate(task string, state int) []byte {
	taskID := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), task)
	status := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), taskID)
	status = protowire.AppendVarint(protowire.AppendTag(status, 2, protowire.VarintType), uint64(state))
	update := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), status)
	ev := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 4) // UPDATE
	return protowire.AppendBytes(protowire.AppendTag(ev, 5, protowire.BytesType), update)
}

const (
	avroV1           = `{"type":"record","name":"Sample","namespace":"e2e","fields":[{"name":"a","type":"string"},{"name":"b","type":"int"}]}`
	avroIncompatible = `{"type":"record","name":"Sample","namespace":"e2e","fields":[{"name":"a","type":"string"},{"name":"b","type":"string"}]}`
	// v2 adds a field with a default: compatible under the broker's default policy (FULL).
	avroV2 = `{"type":"record","name":"Sample","namespace":"e2e","fields":[{"name":"a","type":"string"},{"name":"b","type":"int"},{"name":"c","type":["null","string"],"default":null}]}`
)

func typedConfig(url, ns, js, av, pb, def string) string {
	return fmt.Sprintf(`
pulsar:
  url: %[1]s
routes:
  - name: js
    contentTypes: [application/json]
    schema: {type: json, definition: '%[6]s', validate: true}
    default: {topic: %[3]s}
  - name: av
    contentTypes: [application/octet-stream]
    schema: {type: avro, definition: '%[7]s'}
    default: {topic: %[4]s}
  - name: pb
    contentTypes: [application/x-protobuf]
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event, validate: true}
    default: {topic: %[5]s}
  - name: raw
    contentTypes: [application/json]
    default: {topic: %[3]s}
`, url, ns, js, av, pb, avroV1, def)
}

// TestTypedRoutesPublishWhatAutoConsumeDecodes: in a namespace enforcing schemas, routes
// declaring json, avro and protobuf_native schemas publish, and the Java client's
// AUTO_CONSUME decodes each record's fields as sent; a route without a schema to the
// json topic gets the clear refusal; an incompatible Avro definition is refused naming
// the topic, the schema and the broker's reason, and a reload to a compatible one lets
// the stream go on.
func TestTypedRoutesPublishWhatAutoConsumeDecodes(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "typed")
	b.MustAdmin(t, http.MethodPost, "/admin/v2/namespaces/"+ns+"/schemaValidationEnforced", []byte("true"))
	js, av, pb := "persistent://"+ns+"/"+broker.Name("js"), "persistent://"+ns+"/"+broker.Name("av"), "persistent://"+ns+"/"+broker.Name("pb")
	p := startBridge(t, typedConfig(b.URL, ns, js, av, pb, avroV1))
	post := func(route, ct string, body []byte) (int, string) {
		code, _, out := postOne(t, p.DataURL+"/v1/publish/"+route, map[string]string{"Content-Type": ct}, body)
		return code, string(out)
	}
	for i := range 3 {
		if code, out := post("js", "application/json", fmt.Appendf(nil, `{"a":"js-%d","b":%d}`, i, i)); code != 200 {
			t.Fatalf("json record %d: %d %s", i, code, out)
		}
		if code, out := post("av", "application/octet-stream", avroRecord(fmt.Sprintf("av-%d", i), int32(i))); code != 200 {
			t.Fatalf("avro record %d: %d %s", i, code, out)
		}
		if code, out := post("pb", "application/x-protobuf", schedulerUpdate(fmt.Sprintf("task-%d", i), 1)); code != 200 {
			t.Fatalf("protobuf record %d: %d %s", i, code, out)
		}
	}
	if code, out := post("pb", "application/x-protobuf", []byte{0xff, 0xff}); code != 422 || !strings.Contains(out, "protobuf_native mesos.v1.scheduler.Event") {
		t.Fatalf("a record that is not a scheduler event: %d %s, want 422 naming the schema", code, out)
	}
	code, out := post("raw", "application/json", []byte(`{"a":"raw","b":0}`))
	if code != 502 || !strings.Contains(out, js) || !strings.Contains(out, "without a schema") || !strings.Contains(out, "IncompatibleSchema") {
		t.Fatalf("no schema to the json topic: %d %s, want 502 naming the topic, the missing schema and the broker's refusal", code, out)
	}

	check := func(topic, typ string, n int, want func(i int, v map[string]any) error) {
		t.Helper()
		got := javapeer.AutoConsume(t, b.URL, topic, n, 20*time.Second)
		if len(got) != n {
			t.Fatalf("%s: AUTO_CONSUME read %d messages, want %d: %+v", topic, len(got), n, got)
		}
		for i, m := range got {
			var v map[string]any
			if m.Error != "" || m.Type != typ || json.Unmarshal(m.Value, &v) != nil {
				t.Fatalf("%s message %d: %+v, want a decoded %s record", topic, i, m, typ)
			}
			if err := want(i, v); err != nil {
				t.Fatalf("%s message %d: %s: %v", topic, i, m.Value, err)
			}
		}
		t.Logf("%s: AUTO_CONSUME decoded %d %s records, e.g. %s", topic, n, typ, got[0].Value)
	}
	ab := func(prefix string) func(int, map[string]any) error {
		return func(i int, v map[string]any) error {
			if v["a"] != fmt.Sprintf("%s-%d", prefix, i) || v["b"] != float64(i) {
				return fmt.Errorf("want a=%s-%d b=%d", prefix, i, i)
			}
			return nil
		}
	}
	check(js, "JSON", 3, ab("js"))
	check(av, "AVRO", 3, ab("av"))
	check(pb, "PROTOBUF_NATIVE", 3, func(i int, v map[string]any) error {
		upd, _ := v["update"].(map[string]any)
		st, _ := upd["status"].(map[string]any)
		id, _ := st["task_id"].(map[string]any)
		if v["type"] != "UPDATE" || id["value"] != fmt.Sprintf("task-%d", i) || st["state"] != "TASK_RUNNING" {
			return fmt.Errorf("want an UPDATE of task-%d, TASK_RUNNING", i)
		}
		return nil
	})

	// An incompatible definition (b turns from int to string), then a compatible one.
	applied := configReloads(t, p.OpsURL, "applied")
	p.write(typedConfig(b.URL, ns, js, av, pb, avroIncompatible))
	applied = waitConfigReloads(t, p, "applied", applied, 30*time.Second, "incompatible definition")
	code, out = post("av", "application/octet-stream", avroRecord("bad", 0))
	if code != 502 || !strings.Contains(out, av) || !strings.Contains(out, "avro e2e.Sample") || !strings.Contains(out, "IncompatibleSchema") {
		t.Fatalf("an incompatible definition: %d %s, want 502 naming the topic, the schema and the broker's reason", code, out)
	}
	t.Logf("incompatible definition refused: %s", out)
	p.write(typedConfig(b.URL, ns, js, av, pb, avroV2))
	waitConfigReloads(t, p, "applied", applied, 30*time.Second, "compatible definition")
	rec := append(avroRecord("av-3", 3), 0) // c: the union's null branch
	if code, out := post("av", "application/octet-stream", rec); code != 200 {
		t.Fatalf("after the reload to a compatible definition: %d %s", code, out)
	}
	check(av, "AVRO", 4, ab("av"))
}

// TestEgressGivesAJSONClientProtojsonOfAProtobufTopic: records published through a
// protobuf_native route are served to a client asking Message-Accept: application/json
// as protojson, converted by the schema the broker gives for each message's version
// (GET_SCHEMA), and to a protobuf client as stored, byte for byte.
func TestEgressGivesAJSONClientProtojsonOfAProtobufTopic(t *testing.T) {
	b := broker.Get(t)
	ns := b.Namespace(t, "typedout")
	pb := "persistent://" + ns + "/" + broker.Name("pb")
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
routes:
  - name: pb
    contentTypes: [application/x-protobuf]
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
    default: {topic: %s}
streams:
  - name: out
    topics: [%s]
    contentType: application/x-protobuf
    position: earliest
    overrides: [subscription]
`, b.URL, pb, pb))
	var sent [][]byte
	for i := range 3 {
		rec := schedulerUpdate(fmt.Sprintf("task-%d", i), 1+i) // TASK_RUNNING, TASK_FINISHED, TASK_FAILED
		if code, _, out := postOne(t, p.DataURL+"/v1/publish/pb", map[string]string{"Content-Type": "application/x-protobuf"}, rec); code != 200 {
			t.Fatalf("record %d: %d %s", i, code, out)
		}
		sent = append(sent, rec)
	}
	read := func(sub, accept string) (string, [][]byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out?subscription="+sub, map[string]string{"Message-Accept": accept})
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			body, _ := io.ReadAll(resp.Body)
			t.Fatalf("Message-Accept %s: %d %s", accept, resp.StatusCode, body)
		}
		r := recordio.NewReader(resp.Body)
		var got [][]byte
		for len(got) < len(sent) {
			rec, err := r.NextRecord()
			if err != nil {
				t.Fatalf("Message-Accept %s: after %d records: %v (Stream-Error %q)", accept, len(got), err, resp.Trailer.Get("Stream-Error"))
			}
			got = append(got, append([]byte(nil), rec.Data...))
		}
		return resp.Header.Get("Message-Content-Type"), got
	}
	ct, got := read("json", "application/json")
	if ct != "application/json" {
		t.Fatalf("Message-Content-Type %q, want application/json", ct)
	}
	states := []string{"TASK_RUNNING", "TASK_FINISHED", "TASK_FAILED"}
	for i, rec := range got {
		var v struct {
			Type   string `json:"type"`
			Update struct {
				Status struct {
					TaskID struct{ Value string } `json:"task_id"`
					State  string                 `json:"state"`
				} `json:"status"`
			} `json:"update"`
		}
		if err := json.Unmarshal(rec, &v); err != nil || v.Type != "UPDATE" || v.Update.Status.TaskID.Value != fmt.Sprintf("task-%d", i) || v.Update.Status.State != states[i] {
			t.Fatalf("JSON record %d: %s (%v), want the UPDATE of task-%d, %s", i, rec, err, i, states[i])
		}
	}
	t.Logf("a JSON client reads %s", got[0])
	ct, got = read("bytes", "application/x-protobuf")
	for i, rec := range got {
		if ct != "application/x-protobuf" || !bytes.Equal(rec, sent[i]) {
			t.Fatalf("protobuf record %d: %q %x, want the bytes sent", i, ct, rec)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp := egressGet(t, ctx, p.DataURL+"/v1/streams/out?subscription=plain", map[string]string{"Message-Accept": "text/plain"})
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotAcceptable || !strings.Contains(string(body), "text/plain") || !strings.Contains(string(body), "application/x-protobuf") {
		t.Fatalf("Message-Accept text/plain: %d %s, want 406 naming both types", resp.StatusCode, body)
	}
}
