//go:build unix

package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/client"
	"github.com/recordio-bridge/bridge/recordio"
)

// The Publisher's CPU per record against a plain http.Client writing the same records on
// one streamed request and reading the receipts (their frames, and whether each says 200):
// the cost of keeping the exactly-once rule. The bridge runs in another process, so
// cpu-ns/record is the client's own (user + system time of this process). Run with
//
//	go test -run '^$' -bench 'Publish' -benchtime 200000x -count 6 ./client
func BenchmarkPublisher(b *testing.B) {
	url := startBenchBridge(b)
	rec := benchRecord()
	var persisted int
	p, err := client.NewPublisher(client.PublisherOptions{URL: url, StreamName: "bench",
		OnReceipt: func(r client.Receipt) {
			if r.Outcome == client.Persisted {
				persisted++
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		if _, err := p.Publish(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/record")
	if persisted != b.N {
		b.Fatalf("%d persisted of %d", persisted, b.N)
	}
}

// BenchmarkPublishPlainHTTPClient is the floor: one streamed request, records written
// through a recordio.Writer, receipts' frames read and matched in place for the next
// record's "seq" and "status":200 without decoding them: the least a client does to know
// which records were persisted (it keeps no record to resend, no message id, no outcome
// for a refused one).
func BenchmarkPublishPlainHTTPClient(b *testing.B) {
	next := uint64(0)
	plainPublish(b, func(r []byte) bool {
		if !bytes.HasPrefix(r, []byte(`{"seq":`)) { // not the summary
			return false
		}
		i, seq := len(`{"seq":`), uint64(0)
		for ; i < len(r) && r[i] >= '0' && r[i] <= '9'; i++ {
			seq = seq*10 + uint64(r[i]-'0')
		}
		if seq != next || !bytes.Contains(r[i:], []byte(`"status":200`)) {
			return false
		}
		next++
		return true
	})
}

// BenchmarkPublishPlainHTTPClientJSON decodes each receipt with encoding/json, as the
// resuming client docs/exactly-once.md used to show did.
func BenchmarkPublishPlainHTTPClientJSON(b *testing.B) {
	next := 0
	plainPublish(b, func(r []byte) bool {
		var rc struct {
			Summary bool `json:"summary"`
			Status  int  `json:"status"`
			Seq     int  `json:"seq"`
		}
		if json.Unmarshal(r, &rc) != nil || rc.Summary || rc.Status != 200 || rc.Seq != next {
			return false
		}
		next++
		return true
	})
}

func plainPublish(b *testing.B, ok func([]byte) bool) {
	url := startBenchBridge(b)
	rec := benchRecord()
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	pr, pw := io.Pipe()
	go func() {
		w := recordio.NewWriter(pw)
		for range b.N {
			if err := w.Write(rec); err != nil {
				return
			}
			if w.Buffered() >= 16<<10 {
				_ = w.Flush()
			}
		}
		_ = w.Flush()
		_ = pw.Close()
	}()
	req, _ := http.NewRequest(http.MethodPost, url, pr)
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	req.Header.Set("Accept", "application/recordio")
	req.Header.Set("Stream-Name", "bench")
	req.Header.Set("Stream-Sequence", "0")
	resp, err := hc.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	rd := recordio.NewReader(resp.Body)
	n := 0
	for {
		r, err := rd.Next()
		if err != nil {
			break
		}
		if ok(r) {
			n++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/record")
	if n != b.N {
		b.Fatalf("%d receipted of %d", n, b.N)
	}
}

// benchRecord is a Mesos-like event of about 100 bytes.
func benchRecord() []byte {
	return []byte(`{"type":"UPDATE","update":{"status":{"task_id":{"value":"task-000042"},"state":"TASK_RUNNING","uuid":"` + strconv.Itoa(12345678) + `"}}}`)
}

// cpuTime is this process's user and system time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
