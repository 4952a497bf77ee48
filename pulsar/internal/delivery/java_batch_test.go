package delivery

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// TestParseReadsABatchTheJavaClientCompressedWithEachCodec: the six-message batch the Java
// client's batch container serializes, compressed by its own codecs (the compress
// package's golden payloads), parses into its messages with every codec; for ZLIB this is
// the payload the Java producer flushes without finishing the stream.
func TestParseReadsABatchTheJavaClientCompressedWithEachCodec(t *testing.T) {
	const messages, uncompressed = 6, 591 // what testdata/javagen/JavaCodecs.java's batch() makes
	for _, k := range []pb.CompressionType{pb.CompressionType_LZ4, pb.CompressionType_ZLIB, pb.CompressionType_ZSTD, pb.CompressionType_SNAPPY} {
		t.Run(k.String(), func(t *testing.T) {
			payload, err := os.ReadFile(filepath.Join("..", "compress", "testdata", "java", "batch."+strings.ToLower(k.String())))
			if err != nil {
				t.Fatal(err)
			}
			md := &pb.MessageMetadata{NumMessagesInBatch: proto.Int32(messages), Compression: k.Enum(), UncompressedSize: proto.Uint32(uncompressed)}
			e, err := Parse(marshal(md), payload, nil, testLimits)
			if err != nil {
				t.Fatal(err)
			}
			if e.Kind != Batch || len(e.Messages) != messages {
				t.Fatalf("kind %d with %d messages, want a batch of %d", e.Kind, len(e.Messages), messages)
			}
			for i, m := range e.Messages {
				want := fmt.Sprintf(`{"type":"TASK_UPDATED","task_id":"task-%d","state":"TASK_RUNNING"}`, i)
				key := ""
				if i%2 == 0 {
					key = fmt.Sprintf("agent-%d", i)
				}
				if string(m.Payload) != want || m.Metadata.PartitionKey != key || m.Metadata.SequenceID != uint64(i) {
					t.Errorf("message %d: %q key %q sequence %d; want %q key %q sequence %d",
						i, m.Payload, m.Metadata.PartitionKey, m.Metadata.SequenceID, want, key, i)
				}
			}
		})
	}
}
