package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
)

// A streamed chunked message whose first chunks time out is reported failed, not
// persisted: its later chunks, queued once the failed ones freed the window and stored
// after a reconnection, do not make a message of which consumers can only ever see
// a part.
func TestAStreamedMessageWhoseChunksTimedOutFails(t *testing.T) {
	b := fakeBroker(t)
	b.SetMaxMessageSize(2 << 10)
	const timeout = time.Second
	p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{SendTimeout: timeout})
	b.StopReading() // a frozen broker: the chunks in the window are never answered
	big := bytes.Repeat([]byte("x"), 20<<10)
	type result struct {
		err error
	}
	done := make(chan result, 1)
	go func() {
		_, err := p.SendStream(context.Background(), &pulsar.ProducerMessage{}, int64(len(big)), bytes.NewReader(big))
		done <- result{err}
	}()
	// The first chunks time out and free the window; the next ones are queued on the
	// frozen connection, which is then dropped: they are resent on a new connection.
	time.Sleep(timeout * 3 / 2)
	b.DropConnections()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * timeout):
		t.Fatal("SendStream did not return")
	}
	var chunks []int
	for _, m := range b.Messages("persistent://public/default/fault") {
		chunks = append(chunks, m.Chunk)
	}
	if r.err == nil && (len(chunks) == 0 || chunks[0] != 0) {
		t.Fatalf("SendStream reported the message persisted, but the broker stored chunks %v of it (chunk 0 timed out and was never resent)", chunks)
	}
	if r.err != nil && !errors.Is(r.err, pulsar.ErrSendTimeout) {
		t.Fatalf("SendStream = %v; want ErrSendTimeout", r.err)
	}
	if r.err != nil && len(chunks) > 0 {
		t.Fatalf("chunks %v of a message that had failed were sent after its failure and stored", chunks)
	}
}
