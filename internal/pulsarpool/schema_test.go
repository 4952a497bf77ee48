package pulsarpool

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/ingress"
	"github.com/recordio-bridge/bridge/internal/schema"
	"github.com/recordio-bridge/bridge/pulsar"
)

func compileSchema(t *testing.T, c config.Schema) *schema.Schema {
	t.Helper()
	s, err := schema.Compile(&c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func publishTyped(t *testing.T, p *Pool, topic string, s *schema.Schema, payload string) error {
	t.Helper()
	ch := make(chan error, 1)
	p.PublishAsync(context.Background(), &ingress.Message{Topic: topic, Payload: []byte(payload), Schema: s}, func(_ string, err error) { ch <- err })
	select {
	case err := <-ch:
		return err
	case <-time.After(wait):
		t.Fatalf("no outcome for %q on %s", payload, topic)
		return nil
	}
}

// TestPoolProducersDeclareTheirRecordsSchema: a record's schema is declared by the
// producer of its topic, and a topic written with two schemas (a reload that changed
// it) has one producer per schema, each declaring its own.
func TestPoolProducersDeclareTheirRecordsSchema(t *testing.T) {
	b := fakeBroker(t)
	p, ev := newPool(t, newClient(t, b.URL()), Options{})
	v1 := compileSchema(t, config.Schema{Type: "json", Definition: `{"type":"record","name":"E","fields":[{"name":"a","type":"string"}]}`})
	v2 := compileSchema(t, config.Schema{Type: "json", Definition: `{"type":"record","name":"E","fields":[{"name":"a","type":"string"},{"name":"b","type":["null","string"],"default":null}]}`})
	topic := topicName(1)
	for _, s := range []*schema.Schema{v1, v1, v2} {
		if err := publishTyped(t, p, topic, s, `{"a":"x"}`); err != nil {
			t.Fatal(err)
		}
	}
	if n := ev.count("create " + topic); n != 2 {
		t.Fatalf("%d producers created for two schemas, want 2", n)
	}
	reg := b.Schemas(topic)
	if len(reg) != 2 || string(reg[0].GetSchemaData()) != string(v1.Info().Data) || string(reg[1].GetSchemaData()) != string(v2.Info().Data) {
		t.Fatalf("registered %v, want the two definitions in order", reg)
	}
	for _, m := range b.Messages(topic) {
		if len(m.SchemaVersion) == 0 {
			t.Fatalf("message %d carries no schema version", m.SequenceID)
		}
	}
}

// TestPoolNamesTheTopicAndSchemaABrokerRefuses: a schema the topic refuses fails that
// topic's records with an error naming the topic, the schema and the broker's reason,
// refused for good (not retried per record until the backoff ends), and a record without
// a schema to a topic with one, in a namespace enforcing schemas, says so; other topics
// go on.
func TestPoolNamesTheTopicAndSchemaABrokerRefuses(t *testing.T) {
	b := fakeBroker(t)
	b.EnforceSchemas(true)
	p, ev := newPool(t, newClient(t, b.URL()), Options{CreateRetryMin: time.Hour})
	str := compileSchema(t, config.Schema{Type: "string"})
	js := compileSchema(t, config.Schema{Type: "json", Definition: `{"type":"record","name":"E","fields":[]}`})
	typed, other := topicName(1), topicName(2)
	if err := publishTyped(t, p, typed, str, "s"); err != nil {
		t.Fatal(err)
	}
	err := publishTyped(t, p, typed, js, "{}")
	var se *pulsar.ServerError
	if !errors.Is(err, ingress.ErrRefused) || !errors.As(err, &se) || se.Code != pulsar.CodeIncompatibleSchema ||
		!strings.Contains(err.Error(), typed) || !strings.Contains(err.Error(), "json E") || !strings.Contains(err.Error(), se.Message) {
		t.Fatalf("a refused schema: %v, want a refusal naming %s, json E and the broker's reason", err, typed)
	}
	err = publishTyped(t, p, typed, nil, "bytes")
	if !errors.Is(err, ingress.ErrRefused) || !strings.Contains(err.Error(), typed) || !strings.Contains(err.Error(), "without a schema") {
		t.Fatalf("no schema to a typed topic: %v, want a refusal naming %s and the missing schema", err, typed)
	}
	creates := ev.count("create " + typed)
	if err := publishTyped(t, p, typed, js, "{}"); err == nil {
		t.Fatal("the refused schema's next record was published")
	}
	if n := ev.count("create " + typed); n != creates {
		t.Fatalf("the refused schema's next record tried %d more creations within the backoff", n-creates)
	}
	if err := publishTyped(t, p, other, nil, "bytes"); err != nil {
		t.Fatalf("another topic: %v", err)
	}
}
