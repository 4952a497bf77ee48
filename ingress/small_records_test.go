package ingress

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/recordio-bridge/bridge/recordio"
)

// TestPendingBytesBoundTheMemoryOfSmallRecords: ingress.pendingBytes (and memory.budget,
// charged the same) bound what a stream's records awaiting receipts hold in memory, and
// a record holds its queue entry and receipt state whatever its size. Counted by their
// bytes alone, 7-byte records were bounded only by ingress.pendingRecords: 4 096 of them
// (1.3 MiB of entries, 2 MiB measured) against a pendingBytes of 64 KiB.
func TestPendingBytesBoundTheMemoryOfSmallRecords(t *testing.T) {
	pub := newFake()
	pub.hold = true
	l := limits
	l.PendingRecords, l.PendingBytes = 4096, 64<<10
	_, url := serve(t, pub, table(t, oneRoute), l)
	var body []byte
	for range 5000 {
		body = recordio.AppendRecord(body, []byte(`{"n":1}`))
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/publish/r", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/recordio")
	req.Header.Set("Message-Content-Type", "application/json")
	done := make(chan *http.Response, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
		}
		done <- resp
	}()
	// The publisher holds every receipt: the stream publishes until its bounds stop it.
	var queued int64
	deadline := time.Now().Add(10 * time.Second)
	for still := 0; still < 20; {
		if time.Now().After(deadline) {
			pub.releaseAll()
			t.Fatalf("%d records published, still changing or none, after 10 s", pub.queued.Load())
		}
		time.Sleep(10 * time.Millisecond)
		if q := pub.queued.Load(); q != queued || q == 0 {
			queued, still = q, 0
		} else {
			still++
		}
	}
	// What each of them holds at least: its entry in the stream.
	held := queued * int64(unsafe.Sizeof(entry{}))
	t.Logf("%d records awaiting receipts, their entries %d bytes, pendingBytes %d", queued, held, l.PendingBytes)
	if held > l.PendingBytes {
		t.Errorf("%d records of 7 bytes await receipts, their entries alone %d bytes: more than pendingBytes, %d", queued, held, l.PendingBytes)
	}
	pub.releaseAll()
	resp := <-done
	if resp == nil {
		return
	}
	defer resp.Body.Close()
	var ans map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&ans)
	if resp.StatusCode != http.StatusOK || ans["published"] != float64(5000) {
		t.Fatalf("%d %v", resp.StatusCode, ans)
	}
}
