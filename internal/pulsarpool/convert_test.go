package pulsarpool

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/egress"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// waitingForSchema reports whether a goroutine waits in converter for a schema another
// goroutine fetches.
func waitingForSchema() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range strings.Split(string(buf), "\n\n") {
		lines := strings.SplitN(g, "\n", 3)
		if len(lines) >= 2 && strings.Contains(lines[0], "[select") && strings.Contains(lines[1], "(*Subscriber).converter(") {
			return true
		}
	}
	return false
}

// Two streams convert records of the same schema version: the one that asked the broker
// first goes away (its client left) before the answer. The other, still served, fetches
// the schema itself instead of ending with the first one's cancellation.
func TestSchemaWaiterIsNotFailedByTheCancelOfTheStreamThatFetched(t *testing.T) {
	b := fakeBroker(t)
	p, _ := newPool(t, newClient(t, b.URL()), Options{})
	topic := topicName(1)
	s := compileSchema(t, config.Schema{Type: "json", Definition: `{"type":"record","name":"E","fields":[{"name":"a","type":"string"}]}`})
	if err := publishTyped(t, p, topic, s, `{"a":"x"}`); err != nil {
		t.Fatal(err)
	}
	version := b.Messages(topic)[0].SchemaVersion
	entered, gate := make(chan struct{}), make(chan struct{})
	var first, opened sync.Once
	open := func() { opened.Do(func() { close(gate) }) }
	defer open()
	b.SetControl(func(c pulsartest.Command) pulsartest.Reply {
		if c.Cmd.GetType() == pulsartest.CommandGetSchema {
			first.Do(func() {
				close(entered)
				<-gate
			})
		}
		return pulsartest.Pass()
	})
	sub := NewSubscriber(newClient(t, b.URL()), nil)
	d := &egress.Delivery{ID: "1:0:-1:-1", Topic: topic, SchemaVersion: version}
	ctx1, cancel1 := context.WithCancel(context.Background())
	first1 := make(chan error, 1)
	go func() {
		_, err := sub.Convert(ctx1, d, []byte(`{"a":"x"}`), mediaProtobuf, mediaJSON)
		first1 <- err
	}()
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("GET_SCHEMA did not reach the broker")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), wait)
	defer cancel2()
	second := make(chan error, 1)
	go func() {
		_, err := sub.Convert(ctx2, d, []byte(`{"a":"x"}`), mediaProtobuf, mediaJSON)
		second <- err
	}()
	deadline := time.Now().Add(wait)
	for !waitingForSchema() {
		if time.Now().After(deadline) {
			t.Fatal("the second stream does not wait for the first one's fetch")
		}
		time.Sleep(time.Millisecond)
	}
	cancel1()
	<-first1
	open()
	if err := <-second; err != nil {
		t.Fatalf("the stream still served: %v, want its record converted", err)
	}
}
