package mapping

import (
	"strings"
	"testing"

	"github.com/recordio-bridge/bridge/config"
)

// A topicsPattern that does not parse, and a dead-letter topic the pattern would read
// back, are refused naming the key and the value.
func TestTopicsPatternIsCompiledAndItsProblemsNamed(t *testing.T) {
	for doc, want := range map[string]string{
		"topicsPattern: persistent://t/ns/x-(": `streams[0].topicsPattern: pulsar: invalid topic name: topics pattern "persistent://t/ns/x-(" does not compile`,
		"topicsPattern: persistent://t/n.*/x":  `streams[0].topicsPattern: pulsar: invalid topic name: topics pattern "persistent://t/n.*/x": the tenant and namespace must be literal`,
		"topicsPattern: t/ns/x.*":              `streams[0].topicsPattern: pulsar: invalid topic name: topics pattern "t/ns/x.*": want persistent://tenant/namespace/<regex>`,
		"topicsPattern: persistent://t/ns/x.*\n    type: shared\n    retry: {maxDeliveries: 3, deadLetterTopic: persistent://t/ns/x-dlq}": "streams[0].retry.deadLetterTopic: persistent://t/ns/x-dlq matches topicsPattern persistent://t/ns/x.*",
	} {
		cfg, err := config.Parse([]byte("streams:\n  - name: s\n    " + doc + "\n"))
		if err == nil {
			_, err = Compile(cfg)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	cfg, err := config.Parse([]byte("streams:\n  - name: s\n    topicsPattern: persistent://t/ns/x-.*\n    newTopicsPosition: latest\n"))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := tab.Streams()[0]
	if s.TopicsPattern == nil || s.TopicsPattern.Namespace() != "t/ns" || len(s.Topics) != 0 || s.NewTopicsPosition != "latest" {
		t.Fatalf("compiled stream: pattern %v, topics %v, newTopicsPosition %q", s.TopicsPattern, s.Topics, s.NewTopicsPosition)
	}
}
