package e2e

import (
	"testing"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	broker.Main(m, func() error {
		return goleak.Find(
			// The official client (the test peer, not our code) leaves one goroutine per
			// closed partition producer waiting forever in failTimeoutMessages (v0.19.0).
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*partitionProducer).failTimeoutMessages"),
			// ... and one per reassembled chunked message, waiting for its expiry timer.
			goleak.IgnoreTopFunction("github.com/apache/pulsar-client-go/pulsar.(*chunkedMsgCtxMap).discardChunkIfExpire"),
		)
	})
}
