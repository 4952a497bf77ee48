package pulsar_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

// TestAChunkRefusedWhenTheConnectionDropsBeforeTheNextChunksAnswerFailsItsMessage: the
// second of three chunks is refused as corrupt, the third is stored, and the connection
// drops while the producer waits for the third chunk's receipt. Whether the third chunk
// was stored is unknown then; resent, the refused chunk would be stored after it, and
// the message reported sent although no consumer can assemble it. It must fail with
// ErrCorruptInTransit (retryable: the caller sends it again as a new message), with
// deduplication or without, and the producer goes on.
func TestAChunkRefusedWhenTheConnectionDropsBeforeTheNextChunksAnswerFailsItsMessage(t *testing.T) {
	for _, dedup := range []bool{true, false} {
		t.Run(fmt.Sprintf("deduplication=%v", dedup), func(t *testing.T) {
			b := fakeBroker(t)
			b.SetDeduplication(dedup)
			b.SetMaxMessageSize(2 << 10)
			p := producer(t, client(t, b.URL()), pulsar.ProducerOptions{})
			var mu sync.Mutex
			refused := false
			b.SetControl(func(cmd pulsartest.Command) pulsartest.Reply {
				mu.Lock()
				defer mu.Unlock()
				md := &pb.MessageMetadata{}
				if cmd.Cmd.GetType() != pulsartest.CommandSend || refused || proto.Unmarshal(cmd.Metadata, md) != nil || md.GetChunkId() != 1 {
					return pulsartest.Pass()
				}
				refused = true
				return pulsartest.Refuse(pb.ServerError_ChecksumError, "checksum mismatch")
			})
			b.HoldReceipts(true) // every answer waits until the three chunks were written
			big := bytes.Repeat([]byte("x"), 4<<10)
			done := make(chan error, 1)
			p.SendAsync(context.Background(), &pulsar.ProducerMessage{Payload: big}, func(_ pulsar.MessageID, err error) { done <- err })
			waitStored(t, b, 2)  // chunks 0 and 2
			b.ReleaseReceipts(2) // chunk 0's receipt and chunk 1's refusal; chunk 2's stays unread
			time.Sleep(100 * time.Millisecond)
			b.DropConnections() // forgets the held receipt of chunk 2
			b.HoldReceipts(false)
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the chunked message was not settled within 10 s")
			}
			var chunks []int
			for _, m := range b.Messages("persistent://public/default/fault") {
				chunks = append(chunks, m.Chunk)
			}
			if err == nil {
				t.Fatalf("the message was reported sent, but the broker holds its chunks in the order %v", chunks)
			}
			if !errors.Is(err, pulsar.ErrCorruptInTransit) || !pulsar.IsRetryable(err) {
				t.Fatalf("err = %v, want a retryable ErrCorruptInTransit", err)
			}
			if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("after")}); err != nil {
				t.Fatalf("a message sent after the failed one: %v", err)
			}
		})
	}
}
