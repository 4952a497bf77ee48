package mapping

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/schema"
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
	for i, want := range []string{"routes[0].schema: message: no message type mesos.v1.scheduler.Nope",
		`routes[0].rules[0].schema: definition: the Avro definition's type is enum`,
		"routes[0].rules[1].schema: descriptorSet " + notSet,
		"routes[0].rules[2].schema: file:"} {
		if !strings.HasPrefix(p[i], want) {
			t.Errorf("problem %d: %q, want it to start %q", i, p[i], want)
		}
	}
}
