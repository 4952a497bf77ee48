package egress

import (
	"net/http"
	"runtime"
	"testing"
	"time"
)

func TestAnIdleStreamRunsNoGoroutineOfItsOwnBeyondItsConnection(t *testing.T) {
	// Each idle GET costs its connection's goroutines (net/http's handler and its
	// background read, the client's read and write loops here) and nothing more: a
	// stream that waited for the drain on a goroutine of its own paid its stack while
	// idle, for every stream open.
	f := &fakeSub{feed: make(chan *Delivery)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n")
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	before := runtime.NumGoroutine()
	const n = 8
	for range n {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
		req.Header.Set("Accept", "application/recordio")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	time.Sleep(100 * time.Millisecond) // the server's background reads start
	if added := runtime.NumGoroutine() - before; added > 4*n+2 {
		t.Fatalf("%d idle streams added %d goroutines, more than the 4 each of their connections", n, added)
	}
}
