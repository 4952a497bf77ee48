package mapping

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/schema"
)

// TestResolveGivesEachTargetItsSchema: the route's schema is its targets', a rule's own
// replaces it for that rule's topic, and a route with validate refuses a record that
// does not decode as the schema (422 at ingress), naming the schema.
func TestResolveGivesEachTargetItsSchema(t *testing.T) {
	tab := compile(t, `
routes:
  - name: typed
    schema:
      type: json
      definition: '{"type": "record", "name": "Event", "namespace": "ops", "fields": [{"name": "type", "type": "string"}]}'
      validate: true
    rules:
      - match: {json: {type: LOG}}
        topic: logs
        schema: {type: string}
    default: {topic: events}
`)
	r, _ := tab.Route("typed")
	req := r.NewRequest("application/json", http.Header{}, nil)
	tg, err := r.Resolve(req, []byte(`{"type":"UPDATE"}`))
	if err != nil {
		t.Fatal(err)
	}
	if tg.Schema.String() != "json ops.Event" || string(tg.Schema.Info().Data) != `{"type":"record","name":"Event","namespace":"ops","fields":[{"name":"type","type":"string"}]}` {
		t.Fatalf("default target's schema %s %q, want the route's json ops.Event, compacted", tg.Schema, tg.Schema.Info().Data)
	}
	tg, err = r.Resolve(req, []byte(`{"type":"LOG"}`))
	if err != nil || tg.Schema.String() != "string" || tg.Schema.Info().Name != "String" {
		t.Fatalf("rule's target: %v %v, want the rule's string schema", tg.Schema, err)
	}
	_, err = r.Resolve(req, []byte(`["type"]`))
	if !errors.Is(err, schema.ErrInvalidRecord) || !strings.Contains(err.Error(), "json ops.Event") {
		t.Fatalf("a JSON array for a validated json schema: %v, want ErrInvalidRecord naming the schema", err)
	}
}

// TestCompileReportsSchemaProblemsWhereTheyAre: bridge validate names each schema that
// cannot work, at its place in the document.
func TestCompileReportsSchemaProblemsWhereTheyAre(t *testing.T) {
	dir := t.TempDir()
	notSet := filepath.Join(dir, "bad.pb")
	if err := os.WriteFile(notSet, []byte{0xff, 0xff}, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(`
routes:
  - name: a
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Nope}
    rules:
      - topic: x
        schema: {type: avro, definition: '{"type":"enum","name":"E","symbols":["A"]}'}
      - topic: y
        schema: {type: protobuf_native, message: m.M, descriptorSet: ` + notSet + `}
      - topic: z
        schema: {type: json, file: ` + filepath.Join(dir, "missing.avsc") + `}
    default: {topic: d}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(cfg)
	var p config.Problems
	if !errors.As(err, &p) || len(p) != 4 {
		t.Fatalf("Compile: %v, want four problems", err)
	}
	for i, want := range []string{"routes[0].schema: message: mesos.v1.scheduler.Nope is not a built-in type",
		`routes[0].rules[0].schema: definition: the Avro definition's type is enum`,
		"routes[0].rules[1].schema: descriptorSet " + notSet,
		"routes[0].rules[2].schema: file:"} {
		if !strings.Contains(p[i].String(), want) {
			t.Errorf("problem %d: %q, want it to hold %q", i, p[i].String(), want)
		}
	}
}

// schedulerUpdate encodes a Mesos scheduler UPDATE field by field (type 1 = UPDATE 4;
// update 5 > status 1 > task_id 1 > value 1, state 2), independently of the descriptors.
func schedulerUpdate(task string, state uint64) []byte {
	taskID := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), task)
	status := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), taskID)
	status = protowire.AppendVarint(protowire.AppendTag(status, 2, protowire.VarintType), state)
	update := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), status)
	ev := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 4)
	return protowire.AppendBytes(protowire.AppendTag(ev, 5, protowire.BytesType), update)
}

const protoRoutes = `
routes:
  - name: mesos
    namespaces: [mesos/*]
    contentTypes: [application/x-protobuf, application/json]
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
    rules:
      - match: {proto: {type: [UPDATE, FAILURE], update.status.state: TASK_FAILED}}
        topic: mesos/failed/{proto:update.status.task_id.value}
        key: "{proto:update.status.task_id.value}"
      - match: {proto: {type: UPDATE}}
        topic: mesos/tasks/updates
        key: "{proto:update.status.task_id.value}"
        properties: {state: "{proto:update.status.state}"}
    default: {topic: "mesos/events/{proto:type}"}
`

// TestResolveRoutesProtobufRecordsByField: match: {proto: ...} and {proto:PATH} read
// fields of application/x-protobuf records of the route's message type, enums by name,
// like their JSON counterparts; a JSON record of the same route matches no proto
// condition.
func TestResolveRoutesProtobufRecordsByField(t *testing.T) {
	tab := compile(t, protoRoutes)
	r, _ := tab.Route("mesos")
	req := r.NewRequest("application/x-protobuf", http.Header{}, nil)
	tg, err := r.Resolve(req, schedulerUpdate("t-1", 3)) // TASK_FAILED
	if err != nil || tg.Rule != 0 || tg.Topic != "persistent://mesos/failed/t-1" || tg.Key != "t-1" {
		t.Fatalf("a failed task's update: %+v %v, want rule 0, persistent://mesos/failed/t-1 keyed t-1", tg, err)
	}
	tg, err = r.Resolve(req, schedulerUpdate("t-2", 1)) // TASK_RUNNING
	if err != nil || tg.Rule != 1 || tg.Topic != "persistent://mesos/tasks/updates" || tg.Key != "t-2" || tg.Properties["state"] != "TASK_RUNNING" {
		t.Fatalf("a running task's update: %+v %v, want rule 1 keyed t-2 with state TASK_RUNNING", tg, err)
	}
	heartbeat := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 8)
	if tg, err = r.Resolve(req, heartbeat); err != nil || tg.Rule != -1 || tg.Topic != "persistent://mesos/events/HEARTBEAT" {
		t.Fatalf("a heartbeat: %+v %v, want the default, mesos/events/HEARTBEAT", tg, err)
	}
	jreq := r.NewRequest("application/json", http.Header{}, nil)
	if _, err := r.Resolve(jreq, []byte(`{"type":"UPDATE"}`)); !errors.Is(err, ErrUnroutable) || !strings.Contains(err.Error(), "no protobuf field type") {
		t.Fatalf("a JSON record: %v, want unroutable (the default's {proto:type} has no value)", err)
	}
}

// TestResolveKeepsProtobufValuesTopicSafe: a field substituted into a topic may not
// change its structure, as with {json:PATH}.
func TestResolveKeepsProtobufValuesTopicSafe(t *testing.T) {
	tab := compile(t, protoRoutes)
	r, _ := tab.Route("mesos")
	req := r.NewRequest("application/x-protobuf", http.Header{}, nil)
	_, err := r.Resolve(req, schedulerUpdate("../other/x", 3))
	if !errors.Is(err, ErrUnroutable) || !strings.Contains(err.Error(), "proto field update.status.task_id.value") {
		t.Fatalf("a task id with slashes in a topic: %v, want unroutable naming the field", err)
	}
}

// TestCompileChecksProtoPathsAndValues: a proto path needs the route's protobuf_native
// schema and a field of its message type, and an enum condition a name of the enum.
func TestCompileChecksProtoPathsAndValues(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  - name: typed
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
    rules:
      - match: {proto: {type: UPDATED, update.status.nope: x}}
        topic: a
    default: {topic: b}
  - name: untyped
    rules:
      - match: {proto: {type: UPDATE}}
        topic: a
    default: {topic: "{proto:type}"}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(cfg)
	var p config.Problems
	if !errors.As(err, &p) {
		t.Fatalf("Compile: %v, want problems", err)
	}
	got := p.Error()
	for _, want := range []string{
		`routes[0].rules[0].match.proto.type: "UPDATED" is not a value of mesos.v1.scheduler.Event.Type`,
		`routes[0].rules[0].match.proto: proto path "update.status.nope": mesos.v1.TaskStatus has no field "nope"`,
		"routes[1].rules[0].match.proto: {proto:type} needs a protobuf_native schema on the route",
		"routes[1].default.topic:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem %q in:\n%s", want, got)
		}
	}
}
