package mapping

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/recordio-bridge/bridge/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const mesosRoutes = `
routes:
  - name: mesos
    path: /v1/publish/mesos/:cluster
    namespaces: [mesos/*, public/default]
    headers: [X-Framework-Id]
    properties:
      source: scheduler
      cluster: "{path:cluster}"
    rules:
      - match:
          json: {type: HEARTBEAT}
        topic: mesos/heartbeats/{path:cluster}
      - match:
          json: {type: [UPDATE, FAILURE]}
        topic: persistent://mesos/tasks/{json:type}
        key: "{json:update.status.task_id.value}"
        properties: {agent: "{json:update.status.agent_id.value}"}
      - match:
          headers: {X-Priority: high}
        topic: urgent
    default:
      topic: mesos/events/{json:type}
      key: "{header:X-Key}"
`

func compile(t *testing.T, doc string) *Table {
	t.Helper()
	cfg, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

func TestResolveRoutesMesosEventsByType(t *testing.T) {
	tab := compile(t, mesosRoutes)
	cases := []struct {
		name, path, ctype, body string
		header                  map[string]string
		topic, key              string
		rule                    int
		props                   map[string]string
		err                     string
	}{
		{name: "heartbeat by type", path: "/v1/publish/mesos/eu1", ctype: "application/json", body: `{"type":"HEARTBEAT"}`,
			topic: "persistent://mesos/heartbeats/eu1", rule: 0, props: map[string]string{"source": "scheduler", "cluster": "eu1"}},
		{name: "update keyed by task id", path: "/v1/publish/mesos/eu1", ctype: "application/json",
			body:   `{"type":"UPDATE","update":{"status":{"task_id":{"value":"task-7"},"agent_id":{"value":"a1"}}}}`,
			header: map[string]string{"X-Framework-Id": "fw-1"},
			topic:  "persistent://mesos/tasks/UPDATE", key: "task-7", rule: 1,
			props: map[string]string{"source": "scheduler", "cluster": "eu1", "agent": "a1", "x-framework-id": "fw-1"}},
		{name: "failure without agent keeps the rest", path: "/v1/publish/mesos/eu1", ctype: "application/json",
			body:  `{"type":"FAILURE","update":{"status":{"task_id":{"value":"t"}}}}`,
			topic: "persistent://mesos/tasks/FAILURE", key: "t", rule: 1, props: map[string]string{"source": "scheduler", "cluster": "eu1"}},
		{name: "header rule", path: "/v1/publish/mesos/us", ctype: "application/json", body: `{"type":"OFFERS"}`,
			header: map[string]string{"X-Priority": "high"}, topic: "persistent://public/default/urgent", rule: 2,
			props: map[string]string{"source": "scheduler", "cluster": "us"}},
		{name: "default template", path: "/v1/publish/mesos/us", ctype: "application/json", body: `{"type":"OFFERS"}`,
			header: map[string]string{"X-Key": "k"}, topic: "persistent://mesos/events/OFFERS", key: "k", rule: -1,
			props: map[string]string{"source": "scheduler", "cluster": "us"}},
		{name: "protobuf record cannot fill a json template", path: "/v1/publish/mesos/us", ctype: "application/x-protobuf", body: `{"type":"OFFERS"}`,
			err: "route mesos, default target: topic mesos/events/{json:type}: the record has no JSON field type"},
		{name: "value that would change the topic", path: "/v1/publish/mesos/us", ctype: "application/json", body: `{"type":"a/b"}`,
			err: `json field type is "a/b", which is not a topic name part`},
		{name: "value making a topic name of 255 bytes", path: "/v1/publish/mesos/us", ctype: "application/json",
			body:  `{"type":"` + strings.Repeat("t", 255-len("mesos/events/")) + `"}`,
			topic: "persistent://mesos/events/" + strings.Repeat("t", 255-len("mesos/events/")), rule: -1, props: map[string]string{"source": "scheduler", "cluster": "us"}},
		{name: "value making a topic name over 255 bytes", path: "/v1/publish/mesos/us", ctype: "application/json",
			body: `{"type":"` + strings.Repeat("t", 300000) + `"}`,
			err:  "topic mesos/events/{json:type}: the name made is 300013 bytes long, more than 255"},
		{name: "number field", path: "/v1/publish/mesos/us", ctype: "application/json", body: `{"type":42}`,
			topic: "persistent://mesos/events/42", rule: -1, props: map[string]string{"source": "scheduler", "cluster": "us"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, params, ok := tab.Lookup(c.path)
			if !ok {
				t.Fatalf("no route for %s", c.path)
			}
			h := http.Header{}
			for k, v := range c.header {
				h.Set(k, v)
			}
			got, err := r.Resolve(r.NewRequest(c.ctype, h, params), []byte(c.body))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrUnroutable) {
					t.Fatalf("err %v, want one containing %q and wrapping ErrUnroutable", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Topic != c.topic || got.Key != c.key || got.Rule != c.rule || !sameMap(got.Properties, c.props) {
				t.Fatalf("got %+v\nwant topic %s key %q rule %d props %v", got, c.topic, c.key, c.rule, c.props)
			}
		})
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestStreamedRecordsOnlyMatchNonJSONRules(t *testing.T) {
	tab := compile(t, `
routes:
  - name: r
    rules:
      - match: {json: {type: BIG}}
        topic: json-rule
      - match: {contentType: application/json}
        topic: by-type
    default: {topic: other}
`)
	r, _, _ := tab.Lookup("/v1/publish/r")
	req := r.NewRequest("application/json", http.Header{}, nil)
	got, err := r.Resolve(req, nil)
	if err != nil || got.Topic != "persistent://public/default/by-type" {
		t.Fatalf("got %+v, %v", got, err)
	}
	got, _ = r.Resolve(req, []byte(`{"type":"BIG"}`))
	if got.Topic != "persistent://public/default/json-rule" {
		t.Fatalf("in-memory record: %+v", got)
	}
}

func TestLookup(t *testing.T) {
	tab := compile(t, mesosRoutes+`
  - name: plain
    default: {topic: t}
`)
	for path, want := range map[string]string{
		"/v1/publish/plain": "plain", "/v1/publish/plain/": "plain", "/v1/publish/mesos/x": "mesos",
		"/v1/publish/mesos": "", "/v1/publish/mesos/x/y": "", "/v1/publish/other": "", "/": "",
	} {
		r, _, ok := tab.Lookup(path)
		if (want == "") == ok || (ok && r.Name() != want) {
			t.Errorf("%s: got %v %v, want %q", path, r, ok, want)
		}
	}
	if got := tab.Topics(); len(got) != 2 || got[0] != "persistent://public/default/t" && got[1] != "persistent://public/default/t" {
		t.Errorf("static topics %v", got)
	}
}

func TestCompileReportsEveryProblemWithItsPlace(t *testing.T) {
	cfg, err := config.Parse([]byte(`
routes:
  - name: a
    contentTypes: ["not a type/"]
    namespaces: [public, "*/x"]
    rules:
      - topic: "t-{json:type}"
      - topic: "x/{nope}"
        key: "{path:id}"
      - match: {json: {"@reverse": x}}
        topic: "other/ns/t"
    default: {topic: "a/b/c/d"}
  - name: b
    namespaces: [public/default]
    default: {topic: "persistent://team/ns/t", properties: {p: "{json:x"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(cfg)
	var p config.Problems
	if !errors.As(err, &p) || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("err %v", err)
	}
	for _, want := range []string{
		`routes[0].contentTypes: "not a type/"`,
		`routes[0].namespaces: "public" is not tenant/namespace`,
		`routes[0].namespaces: "*/x"`,
		`routes[0].rules[1].topic: "x/{nope}": {nope} is not a placeholder`,
		`routes[0].rules[1].key: "{path:id}" uses {path:id} but the route's path has no :id segment`,
		`routes[0].rules[2].match.json: "@reverse" is not a JSON path`,
		`routes[0].default.topic: topic "a/b/c/d" is neither a name nor tenant/namespace/name`,
		`routes[1].default.topic: topic persistent://team/ns/t is outside the route's namespaces (public/default)`,
		`routes[1].default.properties.p: "{json:x" has a { without its }`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing problem %q in\n%v", want, err)
		}
	}
	// A template topic without namespaces is refused too.
	cfg, _ = config.Parse([]byte("routes:\n  - name: c\n    default: {topic: \"t-{json:type}\"}\n"))
	if _, err := Compile(cfg); err == nil || !strings.Contains(err.Error(), "routes[0].default.topic: \"t-{json:type}\" is a template; list the namespaces it may reach in routes[0].namespaces") {
		t.Fatalf("err %v", err)
	}
}

func TestTemplateTopicOutsideNamespacesIsRefusedPerRecord(t *testing.T) {
	tab := compile(t, `
routes:
  - name: r
    namespaces: [team/*]
    default: {topic: "{header:X-Tenant}/ns/t"}
`)
	r, _, _ := tab.Lookup("/v1/publish/r")
	h := http.Header{"X-Tenant": {"team"}}
	if got, err := r.Resolve(r.NewRequest("application/json", h, nil), []byte(`{}`)); err != nil || got.Topic != "persistent://team/ns/t" {
		t.Fatalf("got %+v %v", got, err)
	}
	h.Set("X-Tenant", "other")
	_, err := r.Resolve(r.NewRequest("application/json", h, nil), []byte(`{}`))
	var re *RouteError
	if !errors.As(err, &re) || !strings.Contains(re.Reason, "persistent://other/ns/t is outside the route's namespaces (team/*)") {
		t.Fatalf("err %v", err)
	}
}

func TestNormalizeTopic(t *testing.T) {
	for in, want := range map[string]string{
		"t": "persistent://public/default/t", "a/b/c": "persistent://a/b/c", "non-persistent://a/b/c": "non-persistent://a/b/c",
		"persistent://a/b/c": "persistent://a/b/c", "a/b": "", "http://a/b/c": "", "a//c": "", "": "",
	} {
		got, err := NormalizeTopic(in)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("%q: got %q, %v; want %q", in, got, err, want)
		}
	}
}

func BenchmarkResolve(b *testing.B) {
	cfg, _ := config.Parse([]byte(mesosRoutes))
	tab, _ := Compile(cfg)
	r, params, _ := tab.Lookup("/v1/publish/mesos/eu1")
	req := r.NewRequest("application/json", http.Header{"X-Framework-Id": {"fw"}}, params)
	body := []byte(`{"type":"UPDATE","update":{"status":{"task_id":{"value":"task-7"},"agent_id":{"value":"a1"},"state":"TASK_RUNNING","message":"` + strings.Repeat("x", 800) + `"}}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Resolve(req, body); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTopicCacheDoesNotOutliveAReload(t *testing.T) {
	before := compile(t, "routes:\n  - name: r\n    namespaces: [team/*]\n    default: {topic: \"{header:X-T}/ns/t\"}\n")
	after := compile(t, "routes:\n  - name: r\n    namespaces: [other/*]\n    default: {topic: \"{header:X-T}/ns/t\"}\n")
	r1, _, _ := before.Lookup("/v1/publish/r")
	req := r1.NewRequest("application/json", http.Header{"X-T": {"team"}}, nil)
	if _, err := r1.Resolve(req, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	r2, _, _ := after.Lookup("/v1/publish/r")
	if _, err := r2.Resolve(req, []byte(`{}`)); !errors.Is(err, ErrUnroutable) {
		t.Fatalf("the reloaded route's namespaces were not applied: %v", err)
	}
}
