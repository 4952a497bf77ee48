package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// A stream reads the topics listed or those a pattern matches, never both; the
// pattern's keys are validated and named, and default to earliest and 60s.
func TestTopicsPatternIsValidated(t *testing.T) {
	for doc, want := range map[string]string{
		"topics: [t]\n    topicsPattern: persistent://t/ns/x.*": `streams[0].topicsPattern: "persistent://t/ns/x.*" and topics exclude each other`,
		"subscription: s": "streams[0].topics: missing; list the topics the stream reads, or match them with topicsPattern",
		"topicsPattern: persistent://t/ns/x.*\n    newTopicsPosition: first":                    `streams[0].newTopicsPosition: "first" is not one of [earliest latest]`,
		"topicsPattern: persistent://t/ns/x.*\n    discoveryInterval: 10ms":                     "streams[0].discoveryInterval: 10ms must be at least 1s",
		"topicsPattern: persistent://t/ns/x.*\n    type: shared\n    retry: {maxDeliveries: 3}": "streams[0].retry.deadLetterTopic: required with topicsPattern",
	} {
		_, err := Parse([]byte("streams:\n  - name: s\n    " + doc + "\n"))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", doc, err, want)
		}
	}
	cfg, err := Parse([]byte("streams:\n  - name: s\n    topicsPattern: persistent://t/ns/x.*\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Streams[0].WithDefaults(); s.NewTopicsPosition != "earliest" || s.DiscoveryInterval.D() != time.Minute {
		t.Fatalf("defaults: newTopicsPosition %q, discoveryInterval %v; want earliest and 1m", s.NewTopicsPosition, s.DiscoveryInterval.D())
	}
}
