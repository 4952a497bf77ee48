package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/javatest"
	"github.com/recordio-bridge/bridge/pulsar"
)

// TestJavaProducerToOurConsumerWithEveryCodec: batches the Java client compresses
// (pulsar-perf produce -z, batching on) reach our consumer whole with every codec: each
// message's payload is one the producer was given and nothing is discarded. The Java ZLIB
// codec flushes its stream without finishing it, which our consumer used to discard.
func TestJavaProducerToOurConsumerWithEveryCodec(t *testing.T) {
	perf := pulsarDistBin(t, "pulsar-perf")
	b := broker.Get(t)
	ours := newOurClient(t, b)
	records := map[string]bool{}
	var file strings.Builder
	for i := range 20 {
		r := fmt.Sprintf(`{"type":"TASK_UPDATED","task_id":"task-%02d","state":"TASK_RUNNING","agent":"agent-%d"}`, i, i%3)
		records[r] = true
		file.WriteString(r + "\n")
	}
	payloads := filepath.Join(t.TempDir(), "payloads.txt")
	if err := os.WriteFile(payloads, []byte(file.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	const messages = 400
	for _, codec := range []string{"LZ4", "ZLIB", "ZSTD", "SNAPPY"} {
		t.Run(codec, func(t *testing.T) {
			topic := b.Topic(t, "java-"+strings.ToLower(codec))
			cons := ourSubscribe(t, ours, pulsar.ConsumerOptions{Topics: []string{topic}, ReceiverQueueSize: 1000})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			// A 20 ms batching window at 2000 msg/s: about 40 messages a batch.
			cmd := exec.CommandContext(ctx, perf, "produce", "-u", b.URL, "-z", codec, "-m", fmt.Sprint(messages),
				"-r", "2000", "-b", "20", "-f", payloads, "-ef", topic)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("pulsar-perf produce -z %s: %v\n%s", codec, err, out)
			}
			// Everything is in the topic now: its delivery takes seconds, not minutes.
			recvCtx, cancelRecv := context.WithTimeout(ctx, time.Minute)
			defer cancelRecv()
			batched := 0
			for n := range messages {
				msg, err := cons.Receive(recvCtx)
				if err != nil {
					t.Fatalf("message %d of %d: %v (consumer stats %+v)", n, messages, err, cons.Stats())
				}
				if !records[string(msg.Payload())] {
					t.Fatalf("message %d: %q is none of the producer's payloads", n, msg.Payload())
				}
				if msg.ID.BatchIndex > 0 {
					batched++
				}
				if err := cons.Ack(msg); err != nil {
					t.Fatal(err)
				}
			}
			if batched == 0 {
				t.Fatalf("no message came in a batch: the producer did not batch, so this proves nothing of compressed batches")
			}
			if s := cons.Stats(); s.Discarded != 0 {
				t.Fatalf("stats %+v: nothing may be discarded", s)
			}
		})
	}
}

// pulsarDistBin: the path of a program of the Apache Pulsar distribution that
// e2e/pulsar/pulsar.sh unpacks (PULSAR_CACHE_DIR, PULSAR_VERSION); the test is skipped when
// it or java is missing.
func pulsarDistBin(t testing.TB, name string) string {
	t.Helper()
	bin := filepath.Join(javatest.DistDir(), "bin", name)
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("skipping: the Java client's %s is not at %s (e2e/pulsar/pulsar.sh fetch unpacks it there)", name, bin)
	}
	if _, err := exec.LookPath("java"); err != nil {
		t.Skipf("skipping: %s needs java on PATH", name)
	}
	return bin
}
