package mapping

import (
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/recordio-bridge/bridge/config"
)

// BenchmarkRouteProtobufVsJSON routes the same Mesos scheduler UPDATE (an 800-byte
// message field among the ids and state) as JSON with gjson paths and as protobuf with
// proto paths, by the same rules: the type condition, the task id key and the agent
// property.
func BenchmarkRouteProtobufVsJSON(b *testing.B) {
	event := `{"type":"UPDATE","update":{"status":{"task_id":{"value":"task-7"},"agent_id":{"value":"a1"},"state":"TASK_RUNNING","message":"` + strings.Repeat("x", 800) + `"}}}`
	cfg, err := config.Parse([]byte(`
routes:
  - name: json
    rules:
      - match: {json: {type: [UPDATE, FAILURE]}}
        topic: tasks
        key: "{json:update.status.task_id.value}"
        properties: {agent: "{json:update.status.agent_id.value}"}
    default: {topic: events}
  - name: proto
    schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
    rules:
      - match: {proto: {type: [UPDATE, FAILURE]}}
        topic: tasks
        key: "{proto:update.status.task_id.value}"
        properties: {agent: "{proto:update.status.agent_id.value}"}
    default: {topic: events}
`))
	if err != nil {
		b.Fatal(err)
	}
	tab, err := Compile(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pr, _ := tab.Route("proto")
	msg := dynamicpb.NewMessage(pr.schema.Message())
	if err := protojson.Unmarshal([]byte(event), msg); err != nil {
		b.Fatal(err)
	}
	pb, err := proto.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		route, ct string
		body      []byte
	}{{"json", "application/json", []byte(event)}, {"proto", "application/x-protobuf", pb}} {
		b.Run(c.route, func(b *testing.B) {
			r, _ := tab.Route(c.route)
			req := r.NewRequest(c.ct, http.Header{}, nil)
			tg, err := r.Resolve(req, c.body)
			if err != nil || tg.Key != "task-7" || tg.Properties["agent"] != "a1" || tg.Rule != 0 {
				b.Fatalf("%+v %v", tg, err)
			}
			b.SetBytes(int64(len(c.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Resolve(req, c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
