package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestProducerDeclaresItsSchemaAndItsMessagesCarryTheVersion: a producer with a Schema
// sends it with PRODUCER, so the broker registers it; every message, batched or not,
// carries the version the broker answered with (AUTO_CONSUME reads fields by it), and
// GetSchema gives the schema back by that version.
func TestProducerDeclaresItsSchemaAndItsMessagesCarryTheVersion(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &pulsar.Schema{Type: pulsar.SchemaAvro, Data: []byte(`{"type":"record","name":"E","fields":[]}`),
		Properties: map[string]string{"__alwaysAllowNull": "true"}}
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "typed", Schema: s})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for range 3 {
		p.SendAsync(ctx, &pulsar.ProducerMessage{Payload: []byte("m")}, func(pulsar.MessageID, error) {})
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	reg := b.Schemas("persistent://public/default/typed")
	if len(reg) != 1 || reg[0].GetType().String() != "Avro" || !bytes.Equal(reg[0].GetSchemaData(), s.Data) ||
		len(reg[0].GetProperties()) != 1 || reg[0].GetProperties()[0].GetKey() != "__alwaysAllowNull" {
		t.Fatalf("registered schemas %v, want the producer's", reg)
	}
	msgs := b.Messages("persistent://public/default/typed")
	if len(msgs) != 3 {
		t.Fatalf("%d messages stored, want 3", len(msgs))
	}
	for _, m := range msgs {
		if len(m.SchemaVersion) == 0 {
			t.Fatalf("message %d carries no schema version", m.SequenceID)
		}
	}
	got, err := c.GetSchema(ctx, "typed", msgs[0].SchemaVersion)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(s) {
		t.Fatalf("GetSchema: %+v, want %+v", got, s)
	}
}

// TestProducerWithARefusedSchemaFailsForGood: a schema the broker refuses
// (IncompatibleSchema) cannot be cured by retrying, so the creation fails at once with
// the broker's reason instead of retrying until its deadline.
func TestProducerWithARefusedSchemaFailsForGood(t *testing.T) {
	b := fakeBroker(t)
	c := client(t, b.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "typed", Schema: &pulsar.Schema{Type: pulsar.SchemaString, Name: "String"}})
	if err != nil {
		t.Fatal(err)
	}
	p.Close()
	b.EnforceSchemas(true)
	for _, s := range []*pulsar.Schema{{Type: pulsar.SchemaJSON, Data: []byte(`{}`)}, nil} {
		before := b.Frames(pb.BaseCommand_PRODUCER)
		_, err = c.CreateProducer(ctx, pulsar.ProducerOptions{Topic: "typed", Schema: s})
		var se *pulsar.ServerError
		if !errors.As(err, &se) || se.Code.String() != "IncompatibleSchema" || pulsar.IsRetryable(err) {
			t.Fatalf("schema %v: CreateProducer: %v, want a permanent IncompatibleSchema", s, err)
		}
		if n := b.Frames(pb.BaseCommand_PRODUCER) - before; n != 1 {
			t.Fatalf("schema %v: %d PRODUCER frames, want 1 (no retry)", s, n)
		}
	}
}

// TestGetSchemaOfABrokerThatNeverAnswersEndsAtTheOperationTimeout: GET_SCHEMA is bounded
// by OperationTimeout like every other request, so a caller whose context has no
// deadline (an egress stream's request) is not held for ever by a broker that stopped
// answering.
func TestGetSchemaOfABrokerThatNeverAnswersEndsAtTheOperationTimeout(t *testing.T) {
	b := fakeBroker(t)
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandGetSchema {
			return pulsartest.Ignore()
		}
		return pulsartest.Pass()
	})
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.OperationTimeout = 300 * time.Millisecond })
	done := make(chan error, 1)
	go func() {
		_, err := c.GetSchema(context.Background(), "typed", []byte{0, 0, 0, 0, 0, 0, 0, 0})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("GetSchema: %v, want the operation timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("GetSchema still waiting for an answer that never comes")
	}
}
