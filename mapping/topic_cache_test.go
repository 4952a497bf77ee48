package mapping

import (
	"net/http"
	"testing"
)

// TestATopicMadeOfTheRequestIsTheRulesOwn: a request's records go by JSON rules to two
// topics that are both made of the request alone (a header, a path parameter), or by
// default to one made of the record; the topic a rule made for the request is reused
// for its later records, never for the other rule's, and one made of a record is made
// again for the next, whatever order the records come in.
func TestATopicMadeOfTheRequestIsTheRulesOwn(t *testing.T) {
	tab := compile(t, `
routes:
  - name: r
    path: /v1/publish/r/:cluster
    namespaces: [public/default]
    rules:
      - match:
          json: {type: A}
        topic: "a-{header:X-T}"
      - match:
          json: {type: B}
        topic: "b-{path:cluster}"
    default:
      topic: "{json:type}-{header:X-T}"
`)
	r, params, ok := tab.Lookup("/v1/publish/r/c1")
	if !ok {
		t.Fatal("no route")
	}
	req := r.NewRequest("application/json", http.Header{"X-T": {"t1"}}, params)
	want := map[string]string{"A": "persistent://public/default/a-t1", "B": "persistent://public/default/b-c1", "C": "persistent://public/default/C-t1", "D": "persistent://public/default/D-t1"}
	for i, typ := range []string{"A", "A", "B", "B", "A", "C", "D", "A", "C", "B", "D"} {
		got, err := r.Resolve(req, []byte(`{"type":"`+typ+`"}`))
		if err != nil {
			t.Fatalf("record %d (%s): %v", i, typ, err)
		}
		if got.Topic != want[typ] {
			t.Fatalf("record %d (%s): topic %s, want %s", i, typ, got.Topic, want[typ])
		}
	}
}
