package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/e2e/javapeer"
)

// TestEgressDeliversLargeCompressedJavaMessages: on the real broker, messages of the Java
// producer far larger than the broker's maxMessageSize (5 MiB) reach an egress stream
// (envelope none) byte-exact, with the bridge's default memory budget and stream limits:
//
//   - 7 000 000 bytes, batching off, ZSTD, not chunked: the producer checks the compressed
//     size against the broker's limit, so it is stored as one entry of about 3 MB. The
//     bridge's consumer bounded its uncompressed size by the broker's limit, acknowledged
//     it as corrupt (UncompressedSizeCorruption) and egress wrote nothing.
//   - a ZSTD batch of four 2 000 000-byte messages (batchingMaxBytes 16 MiB): 8 MB once
//     decompressed, stored as one entry below the limit; lost the same way.
//   - 40 000 000 bytes, batching off, ZSTD, chunked (4 MiB chunks): reassembled, then
//     decompressed.
//
// The Java consumer reads each whole as well, on its own subscription: the oracle that the
// broker holds valid messages.
func TestEgressDeliversLargeCompressedJavaMessages(t *testing.T) {
	javapeer.Build(t)
	b := broker.Get(t)
	for _, tc := range []struct {
		name    string
		spec    javapeer.Spec
		entries int // the entries the messages must be stored in
	}{
		{"zstd-7000000-unchunked", javapeer.Spec{Count: 1, Size: 7_000_000, Compression: "ZSTD", NoBatching: true, SendTimeoutMs: 60000}, 1},
		{"zstd-batch-of-4x2000000", javapeer.Spec{Count: 4, Size: 2_000_000, Compression: "ZSTD", BatchMaxMessages: 4, BatchMaxBytes: 16 << 20,
			BatchDelayMs: 5000, SendTimeoutMs: 60000}, 1},
		{"zstd-40000000-chunked", javapeer.Spec{Count: 1, Size: 40_000_000, Compression: "ZSTD", NoBatching: true,
			Chunking: true, ChunkMaxBytes: 4 << 20, SendTimeoutMs: 120000}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := tc.spec
			spec.URL, spec.Topic = b.URL, b.Topic(t, "large")
			start := time.Now()
			sent := mustProduce(t, spec)
			want := map[string]int{}
			entries := map[[2]int64]bool{}
			for _, m := range sent {
				want[m.SHA256]++
				entries[[2]int64{m.ID.Ledger, m.ID.Entry}] = true
			}
			t.Logf("the Java producer sent %d messages of %d bytes as %s.. in %v", len(sent), spec.Size, sent[0].ID.Text, time.Since(start).Round(time.Millisecond))
			if tc.entries > 0 && len(entries) != tc.entries {
				t.Fatalf("the Java producer stored %d messages in %d entries, want %d: the case proves nothing", len(sent), len(entries), tc.entries)
			}

			// The Java consumer reads them whole: the broker stored valid messages.
			got, sum := javapeer.Consume(t, javapeer.Spec{URL: b.URL, Topic: spec.Topic, Subscription: "java-oracle", Count: spec.Count, TimeoutMs: 60000})
			if d := hashDiff(want, got); d != "" {
				t.Fatalf("the Java consumer read %d messages: %s; its log:\n%s", len(got), d, sum.Stderr)
			}

			// The bridge with its defaults (memory.budget 128 MiB, receiverQueueBytes 1 MiB).
			p := egressBridge(t, b, spec.Topic, "    envelope: none\n    contentType: application/octet-stream", "")
			rd := openEgressReader(t, p.DataURL+"/v1/streams/out", false)
			start = time.Now()
			recs := rd.readAll(t, spec.Count, 60*time.Second, 2*time.Second, false)
			var delivered []javapeer.Message
			for _, r := range recs {
				delivered = append(delivered, javapeer.Message{SHA256: hashOf(r.raw), Size: len(r.raw)})
			}
			m := scrapeMetrics(t, p.OpsURL)
			corrupt := metricValue(t, m, `bridge_egress_undecodable_total{reason="uncompressed_size_corruption"}`)
			malformed := metricValue(t, m, `bridge_egress_discarded_total{reason="malformed"}`)
			if d := hashDiff(want, delivered); d != "" {
				err, _ := rd.err.Load().(string)
				t.Fatalf("egress wrote %d records: %s; uncompressed_size_corruption %.0f, malformed %.0f; reading: %q; bridge: %s",
					len(recs), d, corrupt, malformed, err, firstWarning(p))
			}
			if corrupt != 0 || malformed != 0 {
				t.Fatalf("uncompressed_size_corruption %.0f, malformed %.0f: nothing may be discarded", corrupt, malformed)
			}
			t.Logf("egress delivered %d records of %d bytes byte-exact (SHA-256) in %v; memory budget peak %.0f of %.0f bytes", len(recs), spec.Size,
				time.Since(start).Round(time.Millisecond), metricValue(t, m, "bridge_memory_budget_peak_bytes"), metricValue(t, m, "bridge_memory_budget_limit_bytes"))
		})
	}
}

// hashDiff says how got differs from want (SHA-256 → count) and the sizes, or "" if it does not.
func hashDiff(want map[string]int, got []javapeer.Message) string {
	left := maps.Clone(want)
	var extra []string
	for _, m := range got {
		if left[m.SHA256] == 0 {
			extra = append(extra, fmt.Sprintf("%d bytes, sha256 %.16s", m.Size, m.SHA256))
			continue
		}
		left[m.SHA256]--
	}
	missing, sent := 0, 0
	for h, n := range left {
		missing, sent = missing+n, sent+want[h]
	}
	if missing == 0 && len(extra) == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d sent missing, %d not sent or doubled [%s]", missing, sent, len(extra), strings.Join(extra, "; "))
}
