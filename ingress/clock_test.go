package ingress

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/recordio"
)

// heldPublisher keeps every callback until n messages are published, then answers them
// all, as a broker answers a window of entries.
type heldPublisher struct {
	mu    sync.Mutex
	n     int
	dones []func(string, error)
}

func (p *heldPublisher) PublishAsync(_ context.Context, _ *Message, done func(string, error)) {
	p.mu.Lock()
	p.dones = append(p.dones, done)
	var all []func(string, error)
	if len(p.dones) == p.n {
		all = p.dones
	}
	p.mu.Unlock()
	for _, d := range all {
		go d("1:1:-1:-1", nil) // from another goroutine, as the producer's dispatcher does
	}
}

func (p *heldPublisher) PublishStream(context.Context, *Message, int64, io.Reader) (string, error) {
	return "", nil
}

// TestOnlySampledRecordsReadTheClock: the latency sample is every 8th record and every
// one that finds its stream idle; the other records read the clock neither when
// published nor when answered (two reads per record were 3 % of the ingress path's CPU
// at saturation). 800 records published before any is answered: the first finds the
// stream idle, 100 are every 8th.
func TestOnlySampledRecordsReadTheClock(t *testing.T) {
	var reads atomic.Int64
	clock = func() time.Time { reads.Add(1); return time.Now() }
	defer func() { clock = time.Now }()
	const records = 800
	pub := &heldPublisher{n: records}
	l := limits
	l.PendingRecords = records
	_, url := serve(t, pub, table(t, "routes:\n  - name: r\n    default: {topic: t}\n"), l)
	var body []byte
	for range records {
		body = recordio.AppendRecord(body, []byte(`{"a":1}`))
	}
	reads.Store(0)
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"published":800`)) {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	// A sampled record reads it three times (published, answered, settled).
	n := reads.Load()
	t.Logf("%d clock reads for %d records", n, records)
	if n > 3*(records/8+1)+10 {
		t.Fatalf("the clock was read %d times for %d records, %d of them sampled", n, records, records/8+1)
	}
}
