package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"
)

// orderedDLQSub is a dlqSub that records, in order, its dead letters and acknowledgements,
// and the options it was subscribed with.
type orderedDLQSub struct {
	*dlqSub
	omu    sync.Mutex
	events []string
	opts   SubscribeOptions
}

func (f *orderedDLQSub) Subscribe(ctx context.Context, o SubscribeOptions) (Subscription, error) {
	f.omu.Lock()
	f.opts = o
	f.omu.Unlock()
	return f, nil
}

func (f *orderedDLQSub) DeadLetter(ctx context.Context, d *Delivery, topic string) error {
	err := f.dlqSub.DeadLetter(ctx, d, topic)
	f.omu.Lock()
	defer f.omu.Unlock()
	if err != nil {
		f.events = append(f.events, "dlq-failed:"+d.ID)
	} else {
		f.events = append(f.events, "dlq:"+d.ID+"@"+topic)
	}
	return err
}

func (f *orderedDLQSub) Ack(d *Delivery) error {
	err := f.fakeSub.Ack(d)
	f.omu.Lock()
	defer f.omu.Unlock()
	f.events = append(f.events, "ack:"+d.ID)
	return err
}

func (f *orderedDLQSub) Nack(d *Delivery, after time.Duration) {
	f.fakeSub.Nack(d, after)
	f.omu.Lock()
	defer f.omu.Unlock()
	f.events = append(f.events, "nack:"+d.ID)
}

func newOrderedDLQSub(fails int) *orderedDLQSub {
	return &orderedDLQSub{dlqSub: &dlqSub{fakeSub: &fakeSub{feed: make(chan *Delivery, 10)}, dlqFails: fails}}
}

// readToEnd reads every record of a stream that ends.
func readToEnd(t *testing.T, url string) []string {
	t.Helper()
	_, rd := get(t, url)
	var out []string
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(rec))
	}
}

var errUndecodable = errors.New("pulsar: message 1:0:-1 on t cannot be decoded (decompression_error)")

// TestEgressDeadLettersAnUndecodableMessageBeforeAcknowledgingIt: a message its consumer
// could not decode is never written to the client; with a dead-letter topic it is
// published there, and only then acknowledged.
func TestEgressDeadLettersAnUndecodableMessageBeforeAcknowledgingIt(t *testing.T) {
	f := newOrderedDLQSub(0)
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    retry: {deadLetterTopic: s-dlq}\n")
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "persistent://public/default/t", Payload: []byte("zlib garbage"), Undecodable: errUndecodable}
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "persistent://public/default/t", Payload: []byte("good")}
	close(f.feed)
	if got := readToEnd(t, url+"/v1/streams/s"); fmt.Sprint(got) != "[good]" {
		t.Fatalf("written %q", got)
	}
	f.omu.Lock()
	defer f.omu.Unlock()
	var undecodable []string // the good message's ack comes with its flush, whenever the dead letter goes
	for _, e := range f.events {
		if e != "ack:1:1:-1:-1" {
			undecodable = append(undecodable, e)
		}
	}
	if want := "[dlq:1:0:-1:-1@persistent://public/default/s-dlq ack:1:0:-1:-1]"; fmt.Sprint(undecodable) != want || len(f.events) != 3 {
		t.Fatalf("events %v, want %s and the good message's ack", f.events, want)
	}
	if !f.opts.DeliverUndecodable || f.opts.CryptoFailure != "fail" {
		t.Fatalf("subscribed with %+v: want undecodable messages handed up and cryptoFailure fail", f.opts)
	}
}

// TestEgressKeepsAnUndecodableMessageWhoseDeadLetteringFails: a failed publication
// leaves it unacknowledged (sent back for redelivery after its backoff), and the
// stream goes on with the next message.
func TestEgressKeepsAnUndecodableMessageWhoseDeadLetteringFails(t *testing.T) {
	f := newOrderedDLQSub(1)
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    type: shared\n    retry: {maxDeliveries: 5}\n")
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "persistent://public/default/t", Payload: []byte("zlib garbage"), Undecodable: errUndecodable}
	f.feed <- &Delivery{ID: "1:1:-1:-1", Topic: "persistent://public/default/t", Payload: []byte("good")}
	_, rd := get(t, url+"/v1/streams/s")
	written := make(chan string, 1)
	go func() {
		var out []string
		for {
			rec, err := rd.Next()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					out = append(out, "error: "+err.Error())
				}
				written <- fmt.Sprint(out)
				return
			}
			out = append(out, string(rec))
		}
	}()
	// The broker brings it again after its backoff: once it was sent back.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.omu.Lock()
		nacked := slices.Contains(f.events, "nack:1:0:-1:-1")
		f.omu.Unlock()
		if nacked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message whose dead-lettering failed was never sent back")
		}
	}
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "persistent://public/default/t", Payload: []byte("zlib garbage"), Undecodable: errUndecodable, Redeliveries: 1}
	close(f.feed)
	if got := <-written; got != "[good]" {
		t.Fatalf("written %q", got)
	}
	f.omu.Lock()
	defer f.omu.Unlock()
	var undecodable []string // the good message's ack comes with its flush
	for _, e := range f.events {
		if e != "ack:1:1:-1:-1" {
			undecodable = append(undecodable, e)
		}
	}
	want := "[dlq-failed:1:0:-1:-1 nack:1:0:-1:-1 dlq:1:0:-1:-1@persistent://public/default/t-bridge-s-DLQ ack:1:0:-1:-1]"
	if fmt.Sprint(undecodable) != want || len(f.events) != 5 {
		t.Fatalf("events %v, want %s and the good message's ack", f.events, want)
	}
	if f.delays[0] <= 0 {
		t.Fatalf("nacked with no backoff: %v", f.delays)
	}
}

// TestEgressBacksOffAnUndecodableMessageWhoseDeadLetteringKeepsFailing: on an exclusive
// subscription, where the broker counts no redeliveries, each failed attempt still waits
// longer than the one before (up to retry.max), and the message is never acknowledged.
func TestEgressBacksOffAnUndecodableMessageWhoseDeadLetteringKeepsFailing(t *testing.T) {
	f := newOrderedDLQSub(4)
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    retry: {deadLetterTopic: dlq, initial: 1s, multiplier: 2, jitter: 0, max: 5s}\n")
	for range 4 {
		f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "persistent://public/default/t", Payload: []byte("zlib garbage"), Undecodable: errUndecodable}
	}
	close(f.feed)
	readToEnd(t, url+"/v1/streams/s")
	f.omu.Lock()
	defer f.omu.Unlock()
	if fmt.Sprint(f.delays) != "[1s 2s 4s 5s]" || len(f.acked) != 0 {
		t.Fatalf("nacked after %v, acknowledged %v; want [1s 2s 4s 5s] and nothing", f.delays, f.acked)
	}
}

// TestEgressAsksForUndecodableMessagesOnlyWithADeadLetterTopic: without one the consumer
// keeps acknowledging them itself (counted), as the Java client does without a DLQ policy.
func TestEgressAsksForUndecodableMessagesOnlyWithADeadLetterTopic(t *testing.T) {
	f := newOrderedDLQSub(0)
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    cryptoFailure: deliver\n")
	close(f.feed)
	readToEnd(t, url+"/v1/streams/s")
	f.omu.Lock()
	defer f.omu.Unlock()
	if f.opts.DeliverUndecodable || f.opts.CryptoFailure != "deliver" {
		t.Fatalf("subscribed with %+v", f.opts)
	}
}

// TestEgressEnvelopeSaysAMessageIsEncrypted: a message delivered still encrypted
// (cryptoFailure: deliver) goes as payloadBase64, even when its bytes happen to be JSON,
// with what decrypting it takes.
func TestEgressEnvelopeSaysAMessageIsEncrypted(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n    envelope: json\n    cryptoFailure: deliver\n")
	enc := &Encryption{Keys: []EncryptionKey{{Name: "bridge", Value: []byte{1, 2}}}, Param: []byte("iv"), Compression: "LZ4", UncompressedSize: 9, Metadata: []byte{8, 1}}
	f.feed <- &Delivery{ID: "1:0:-1:-1", Topic: "persistent://public/default/t", Payload: []byte(`{}`), Encryption: enc}
	close(f.feed)
	got := readToEnd(t, url+"/v1/streams/s")
	if len(got) != 1 {
		t.Fatalf("%q", got)
	}
	var env struct {
		Encrypted     bool
		Encryption    *Encryption
		Payload       json.RawMessage
		PayloadBase64 string
	}
	if err := json.Unmarshal([]byte(got[0]), &env); err != nil {
		t.Fatal(err)
	}
	if !env.Encrypted || env.Encryption == nil || env.Encryption.Compression != "LZ4" || env.Encryption.Keys[0].Name != "bridge" ||
		string(env.Encryption.Param) != "iv" || env.Payload != nil || env.PayloadBase64 != "e30=" {
		t.Fatalf("envelope %s", got[0])
	}
}
