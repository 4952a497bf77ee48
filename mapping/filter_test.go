package mapping

import (
	"errors"
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/config"
)

// TestAStreamFilterIsRefusedWhereItCannotWork: a filter's alternative naming request
// headers or a media type (stored messages have neither), one without conditions, proto
// conditions without the message type, and an enum value the type does not have are
// each named at their place.
func TestAStreamFilterIsRefusedWhereItCannotWork(t *testing.T) {
	_, err := config.Parse([]byte(`
streams:
  - name: s
    topics: [t]
    filter:
      match:
        - headers: {X-A: [b]}
        - contentType: application/json
        - {}
        - proto: {type: [UPDATE]}
`))
	for _, want := range []string{
		"streams[0].filter.match[0].headers: a stream's filter reads stored messages, not requests",
		"streams[0].filter.match[1].contentType: a stream's filter reads stored messages",
		"streams[0].filter.match[2]: an alternative without conditions matches every message",
		"streams[0].filter.match[3].proto: name the message type the fields belong to in streams[0].filter.schema",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config: %v\nwant %q", err, want)
		}
	}
	cfg, err := config.Parse([]byte(`
streams:
  - name: s
    topics: [t]
    filter:
      schema: {type: protobuf_native, message: mesos.v1.scheduler.Event}
      match:
        - proto: {type: [UPDATED]}
`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Compile(cfg)
	var p config.Problems
	if !errors.As(err, &p) || !strings.Contains(err.Error(), `streams[0].filter.match[0].proto.type: "UPDATED" is not a value of mesos.v1.scheduler.Event.Type`) {
		t.Fatalf("Compile: %v", err)
	}
}

// TestAStreamFilterMatchesKeyAndPropertiesWithoutThePayload: key and property
// conditions hold on a message whose payload is not at hand; json conditions do not.
func TestAStreamFilterMatchesKeyAndPropertiesWithoutThePayload(t *testing.T) {
	tab := compile(t, `
streams:
  - name: s
    topics: [t]
    filter:
      match:
        - {key: [k1, k2], properties: {region: [eu]}}
        - json: {kind: [x]}
`)
	f := tab.Streams()[0].Filter
	for _, c := range []struct {
		m    Message
		keep bool
	}{
		{Message{Key: "k1", Properties: map[string]string{"region": "eu"}}, true},
		{Message{Key: "k1", Properties: map[string]string{"region": "us"}}, false},
		{Message{Key: "k3", Properties: map[string]string{"region": "eu"}}, false},
		{Message{Key: "k2"}, false},
		{Message{Payload: []byte(`{"kind":"x"}`)}, true},
		{Message{}, false},
	} {
		if got := f.Keeps(c.m); got != c.keep {
			t.Errorf("Keeps(%+v) = %v, want %v", c.m, got, c.keep)
		}
	}
	if !f.ReadsPayload() {
		t.Error("a filter with a json condition does not say it reads payloads")
	}
}
